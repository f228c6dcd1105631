"""An order, which a task marks processed (counting each run)."""

from django.db import models


class Order(models.Model):
    item = models.CharField(max_length=100)
    processed = models.IntegerField(default=0)
