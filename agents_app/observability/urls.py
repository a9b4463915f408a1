"""`/metrics`; include it at the root of a project's URLconf."""

from django.urls import path

from agents_app.observability import views

urlpatterns = [path("metrics", views.metrics, name="metrics")]
