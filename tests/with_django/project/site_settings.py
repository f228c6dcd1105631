"""The test project's settings: a Django site whose tasks run on heartq, on the database
and queues the test harness names in `DJANGO_SITE` (JSON: tests/with_django/harness.py).

Two task backends: `default`, the queue in Django's own database (an enqueue joins the
view's transaction), and `elsewhere`, a queue in another database (an enqueue waits for
the commit).
"""

import json
import os
from pathlib import Path

SITE = json.loads(os.environ["DJANGO_SITE"])
BASE_DIR = Path(__file__).resolve().parent
SECRET_KEY = "tests-only"
DEBUG = False
ALLOWED_HOSTS = ["testserver", "127.0.0.1", "localhost"]
USE_TZ = True
ROOT_URLCONF = "site_urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django.contrib.sessions",
    *(["django_tasks"] if SITE["flavor"] == "backport" else []),
    "heartq.contrib.django",
    "shop",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
LOGIN_URL = "/login/"
if SITE["database"]["engine"] == "sqlite":
    DATABASES = {
        "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": SITE["database"]["name"]}
    }
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": SITE["database"]["name"],
            "USER": SITE["database"]["user"],
            "PASSWORD": SITE["database"]["password"],
            "HOST": SITE["database"]["host"],
            "PORT": SITE["database"]["port"],
            "OPTIONS": {"options": f"-c search_path={SITE['database']['schema']}"},
        }
    }


def retry_after(attempt, exc):
    """The wait before a retry of `shop.tasks.paced`: 1.5 s after a timeout (heartq's
    `retry_delay`, given by the backend's OPTIONS)."""
    return 1.5 if isinstance(exc, TimeoutError) else None


TASKS = {
    "default": {
        "BACKEND": "heartq.contrib.django.HeartqBackend",
        "QUEUES": ["default", "ordered", "crashy", "parked"],
        "OPTIONS": {
            "SCHEMA": SITE.get("queue_schema"),
            "SETTINGS": SITE.get("heartq_settings", {}),
            "TASKS": {  # heartq's options, by OPTIONS
                "shop.tasks.charge": {"max_retries": 0},
                "shop.tasks.paced": {"retry_delay": retry_after},
            },
        },
    },
    "elsewhere": {
        "BACKEND": "heartq.contrib.django.HeartqBackend",
        "OPTIONS": {"URL": SITE["elsewhere_url"]},
    },
}
EMAIL_BACKEND = "django.core.mail.backends.filebased.EmailBackend"
EMAIL_FILE_PATH = SITE["outbox"]
DEFAULT_FROM_EMAIL = "shop@example.org"
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "loggers": {  # the tasks' signals, logged by the framework (the backport's name)
        "django.tasks": {"handlers": ["stderr"], "level": "INFO"},
        "django_tasks": {"handlers": ["stderr"], "level": "INFO"},
    },
}
