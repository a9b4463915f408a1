"""Root URL configuration: Helix's routes as any project includes them (`agents_app.urls`),
with this deployment's admin, API docs, sign-in and landing pages."""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

handler404 = "sessions_app.http.not_found"

urlpatterns = [
    path("admin/", admin.site.urls),
    # Before Helix's routes, whose last under `api/` answers every other path there.
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("", include("agents_app.urls")),
    path("accounts/", include("agents_app.accounts.urls")),
    path("", include("agents_app.chat.landing_urls")),
]
