"""The example's two URLs: create a report, show it."""

from __future__ import annotations

from django.urls import path

from reports import views

urlpatterns = [
    path("reports/", views.new_report),
    path("reports/<int:pk>/", views.show_report),
]
