"""manage.py of the test project (tests/with_django/project)."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "site_settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
