"""Settings of the Django example: the least Django needs, plus where heartq's queue is."""

from __future__ import annotations

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-only-not-secret")
DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "testserver"]
INSTALLED_APPS = ["reports"]
ROOT_URLCONF = "mysite.urls"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("DJANGO_DB_PATH", str(BASE_DIR / "db.sqlite3")),
    }
}

# Where heartq's queue lives: a SQLite file beside the project here; on PostgreSQL,
# e.g. "postgresql://app@db:5432/app" (heartq keeps to its own schema, `heartq`).
HEARTQ_URL = os.environ.get("HEARTQ_URL", f"sqlite:///{BASE_DIR / 'heartq.db'}")

# heartq's events (worker_started, job_retry_scheduled, job_dead, ...) on stderr.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"heartq": {"()": "heartq.events.TextFormatter"}},
    "handlers": {"heartq": {"class": "logging.StreamHandler", "formatter": "heartq"}},
    "loggers": {"heartq": {"handlers": ["heartq"], "level": "INFO", "propagate": False}},
}
