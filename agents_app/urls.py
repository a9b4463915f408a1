"""Every HTTP route of Helix, for one `include()` at the root of a project's URLconf:
``path("", include("agents_app.urls"))``.

Under `api/`: the custom endpoints of ``HELIX["ENDPOINTS"]``, the REST API and the streams, then
the JSON 404 for any other path there; under `chat/`: the chat page; at the root: `healthz`,
`readyz` and `metrics`. The MCP endpoint (`/mcp`) is ASGI, not Django (`agents_app.asgi`).
"""

from django.urls import include, path, re_path

from agents_app.api.endpoints import endpoint_patterns
from sessions_app.http import api_not_found

urlpatterns = [
    # Custom endpoints come before the built-in routes, which they may replace.
    path("api/", include(endpoint_patterns())),
    path("api/", include("agents_app.api.urls")),
    path("api/", include("streams_app.urls")),
    # Last of the API: a path no route above matches gets the JSON 404, even under DEBUG.
    re_path(r"^api/", api_not_found, name="api-not-found"),
    path("chat/", include("agents_app.chat.urls")),
    path("", include("agents_app.health.urls")),
    path("", include("agents_app.observability.urls")),
]
