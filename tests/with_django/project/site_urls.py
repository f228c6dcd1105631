"""The test project's URLs: the shop's views, and heartq's dashboard behind Django's
staff login."""

from django.urls import include, path
from shop import views

urlpatterns = [
    path("email/", views.email),
    path("email/later/", views.email_later),
    path("email/context/", views.email_with_context),
    path("words/", views.words),
    path("ordered/<str:priority>/", views.ordered),
    path("fail/", views.fail),
    path("crash/", views.crash),
    path("decline/", views.decline),
    path("orders/", views.create_order),
    path("orders/broken/", views.create_order_then_fail),
    path("login/", views.login_page),
    path("heartq/", include("heartq.contrib.django.urls")),
]
