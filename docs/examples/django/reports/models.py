"""One model: a report whose word count a heartq job fills in."""

from __future__ import annotations

from django.db import models


class Report(models.Model):
    """`words` stays empty until the report's job has run."""

    title = models.CharField(max_length=200)
    text = models.TextField()
    words = models.IntegerField(null=True)
