"""Root URL configuration."""

from django.contrib import admin
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from agents_app.api.endpoints import endpoint_patterns
from sessions_app.http import api_not_found

handler404 = "sessions_app.http.not_found"

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    # Custom endpoints come before the built-in routes, which they may replace.
    path("api/", include(endpoint_patterns())),
    path("api/", include("agents_app.api.urls")),
    path("api/", include("streams_app.urls")),
    # Last of the API: a path no route above matches gets the JSON 404, even under DEBUG.
    re_path(r"^api/", api_not_found, name="api-not-found"),
    path("chat/", include("agents_app.chat_urls")),
    path("", include("agents_app.health.urls")),
    path("", include("agents_app.observability.urls")),
]
