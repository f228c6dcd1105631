"""The example's URLs: create a report, show it; the admin (its login); heartq's
dashboard, for staff."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from reports import views

urlpatterns = [
    path("reports/", views.new_report),
    path("reports/<int:pk>/", views.show_report),
    path("admin/", admin.site.urls),
    path("heartq/", include("heartq.contrib.django.urls")),
]
