"""Settings of the Django example: what `startproject` writes (the admin, for its login),
and heartq as the tasks framework's backend: one setting, `TASKS`."""

from __future__ import annotations

import os
from pathlib import Path

import django

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-only-not-secret")
DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "testserver"]
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    # Before Django 6.0, the tasks framework is the django-tasks backport's.
    *(["django_tasks"] if django.VERSION < (6, 0) else []),
    "heartq.contrib.django",  # manage.py heartq_worker; migrate creates heartq's tables
    "reports",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
ROOT_URLCONF = "mysite.urls"
LOGIN_URL = "admin:login"  # where the dashboard sends whoever is not staff
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("DJANGO_DB_PATH", str(BASE_DIR / "db.sqlite3")),
    }
}

# heartq runs the project's tasks; its queue lives in the database above (heartq's own
# tables beside Django's), so a task enqueued in a view's transaction commits with it.
TASKS = {"default": {"BACKEND": "heartq.contrib.django.HeartqBackend"}}

# heartq's events (worker_started, job_retry_scheduled, job_dead, ...) on stderr.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"heartq": {"()": "heartq.events.TextFormatter"}},
    "handlers": {"heartq": {"class": "logging.StreamHandler", "formatter": "heartq"}},
    "loggers": {"heartq": {"handlers": ["heartq"], "level": "INFO", "propagate": False}},
}
