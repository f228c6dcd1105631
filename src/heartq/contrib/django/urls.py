"""The dashboard's URLs, to include in a project's (`heartq.contrib.django.views`):

    path("heartq/", include("heartq.contrib.django.urls")),
"""

from __future__ import annotations

from django.urls import re_path

from heartq.contrib.django import views

app_name = "heartq"
urlpatterns = [re_path(r"^(?P<subpath>.*)$", views.dashboard, name="dashboard")]
