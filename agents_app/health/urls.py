"""`/healthz` and `/readyz`; include them at the root of a project's URLconf."""

from django.urls import path

from agents_app.health import views

urlpatterns = [
    path("healthz", views.healthz, name="healthz"),
    path("readyz", views.readyz, name="readyz"),
]
