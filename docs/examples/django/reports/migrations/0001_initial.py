"""The report table (written by `manage.py makemigrations`, then tidied)."""

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True
    dependencies: list[tuple[str, str]] = []
    operations = [
        migrations.CreateModel(
            name="Report",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("title", models.CharField(max_length=200)),
                ("text", models.TextField()),
                ("words", models.IntegerField(null=True)),
                ("task_id", models.CharField(blank=True, max_length=36)),
            ],
        ),
    ]
