"""No models: heartq's tables are its own schema's (`apps.py` creates them at `manage.py
migrate`). The module exists because Django sends `post_migrate` only to apps that have
one."""
