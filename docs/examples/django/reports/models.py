"""One model: a report whose word count a task fills in."""

from __future__ import annotations

from django.db import models


class Report(models.Model):
    """`words` stays empty until the report's task has run; `task_id` is its
    `TaskResult`'s id (the heartq job's)."""

    title = models.CharField(max_length=200)
    text = models.TextField()
    words = models.IntegerField(null=True)
    task_id = models.CharField(max_length=36, blank=True)
