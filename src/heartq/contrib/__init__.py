"""heartq behind other frameworks' own contracts for background work.

- `heartq.contrib.django`: a task backend for Django's `django.tasks` (Django 6.0+) and
  the `django-tasks` backport (docs/INTEGRATIONS.md#django).
"""
