"""URLs of the test project."""

from django.urls import path

from . import views

urlpatterns = [
    path("counter/", views.counter),
    path("cached/", views.cached),
    path("fragment/", views.fragment),
    path("visits/", views.visits),
    path("metrics", views.metrics),
]
