"""Root URL configuration."""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from agents_app.api.endpoints import endpoint_patterns

handler404 = "sessions_app.http.not_found"

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    # Custom endpoints come before the built-in routes, which they may replace.
    path("api/", include(endpoint_patterns())),
    path("api/", include("agents_app.api.urls")),
    path("api/", include("streams_app.urls")),
    path("chat/", include("agents_app.chat_urls")),
]
