"""Custom endpoints (reference 001 "Custom Endpoints"): handlers declared in settings, served
under `/api/` before the built-in routes, so one may also replace a built-in route.

    HELIX["ENDPOINTS"] = {
        "health": {"HANDLER": "myproject.endpoints.health", "PUBLIC": True},
        "sessions/<session_id:session_id>/summary": "myproject.endpoints.summary",
    }

A key is a Django `path()` route under `/api/`; a value is the handler's dotted path, or a dict of
`HANDLER` and `PUBLIC` (anonymous callers allowed; default False). A handler is
`handler(request, context)`, sync or async, and returns an `HttpResponse` (DRF's `Response` is
one). `request` is DRF's, authenticated as on every API route (session with CSRF, or token).
A route with a `session_id` serves only the session's owner: anyone else gets the 404 of a missing
session before the handler runs, and `context.execution_state` is that session's execution.

The routes are read from the setting when the URLconf loads. They are not in the OpenAPI
document: their shapes are their handlers' own.
"""

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.http import HttpResponseBase
from django.urls import URLPattern, path
from django.utils.module_loading import import_string
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.request import Request

from agents_app.definitions.hooks import ExecutionState, call_hook
from agents_app.runs.execution import SessionExecution
from sessions_app.conf import helix_setting
from sessions_app.rest import HelixAPIView
from sessions_app.selectors import session_for_user

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class EndpointContext:
    """What a custom endpoint's handler receives beside the request."""

    execution_state: ExecutionState
    logger: logging.Logger
    session_id: str | None = None
    path_params: Mapping[str, Any] = field(default_factory=dict)


class CustomEndpointView(HelixAPIView):
    """Serve every method of one route with its handler; the handler answers what it allows."""

    handler: Callable[..., Any] | None = None
    schema = None

    def handle(self, request: Request, **path_params: Any) -> HttpResponseBase:
        session_id = path_params.get("session_id")
        if session_id is not None:
            session_for_user(session_id=session_id, user=request.user)
        context = EndpointContext(
            execution_state=SessionExecution(session_id),
            logger=logger,
            session_id=session_id,
            path_params=path_params,
        )
        response = call_hook(self.handler, request, context)
        if not isinstance(response, HttpResponseBase):
            raise TypeError(
                f"Endpoint {request.path!r} must return an HttpResponse, "
                f"not {type(response).__name__}."
            )
        return response

    get = post = put = patch = delete = handle


def endpoint_patterns() -> list[URLPattern]:
    """Return the routes `HELIX["ENDPOINTS"]` declares, in its order."""
    patterns = []
    for route, config in helix_setting("ENDPOINTS", {}).items():
        if isinstance(config, str):
            config = {"HANDLER": config}
        view = CustomEndpointView.as_view(
            handler=import_string(config["HANDLER"]),
            permission_classes=[AllowAny if config.get("PUBLIC", False) else IsAuthenticated],
        )
        patterns.append(path(route, view, name=f"custom-endpoint-{route}"))
    return patterns
