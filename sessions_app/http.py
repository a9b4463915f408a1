"""Domain errors as HTTP responses: one JSON body shape for every API surface.

`{"error": {"code": "...", "message": "...", "details": {...}}}`, with the status each
`HelixError` subclass declares (a lifecycle hook's refusal answers with its own body instead).
DRF views use `exception_handler`; plain Django views (the SSE stream) use `error_response`
and `require_methods`. `api_not_found`, routed after every API route, answers the paths under
`/api/` that none matches, since Django's own 404 page ignores `handler404` under `DEBUG`.
"""

import functools
from collections.abc import Callable, Iterable
from typing import Any

from asgiref.sync import iscoroutinefunction
from django.conf import settings
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponsePermanentRedirect,
    JsonResponse,
    QueryDict,
)
from django.urls import Resolver404, resolve
from django.views import defaults
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from sessions_app.errors import HelixError, error_body


def error_response(error: HelixError) -> JsonResponse:
    """Return a domain error as a JSON response with its HTTP status."""
    return JsonResponse(error.http_body(), status=error.http_status, headers=error.http_headers)


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """Answer an unknown URL: in the error shape under `/api/`, as Django does elsewhere."""
    if request.path.startswith("/api/"):
        return _no_route(request)
    return defaults.page_not_found(request, exception)


@csrf_exempt  # It changes nothing; a CSRF refusal would be an HTML page.
def api_not_found(request: HttpRequest) -> HttpResponse:
    """Answer a path under `/api/` that no route matches with the JSON 404, whatever `DEBUG`.

    Routed after every API route. As `APPEND_SLASH` would, a GET or HEAD of a route's path
    without its final slash is redirected to the route.
    """
    if request.method in {"GET", "HEAD"} and _slash_route_exists(request):
        return HttpResponsePermanentRedirect(request.get_full_path(force_append_slash=True))
    return _no_route(request)


def require_methods(*methods: str) -> Callable[[Callable], Callable]:
    """Decorate a plain view, sync or async, to answer other methods with the JSON 405."""
    allowed = ", ".join(methods)

    def refusal(request: HttpRequest) -> HttpResponse | None:
        if request.method in methods:
            return None
        body = error_body("method-not-allowed", f'Method "{request.method}" not allowed.')
        return JsonResponse(body, status=405, headers={"Allow": allowed})

    def decorator(view: Callable) -> Callable:
        if iscoroutinefunction(view):

            @functools.wraps(view)
            async def async_view(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
                return refusal(request) or await view(request, *args, **kwargs)

            return async_view

        @functools.wraps(view)
        def sync_view(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            return refusal(request) or view(request, *args, **kwargs)

        return sync_view

    return decorator


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Render domain errors and DRF's own errors in the Helix error shape."""
    if isinstance(exc, HelixError):
        return Response(exc.http_body(), status=exc.http_status, headers=exc.http_headers)
    response = drf_exception_handler(exc, context)
    if response is None or not isinstance(exc, exceptions.APIException):
        return response
    if isinstance(exc, exceptions.ValidationError):
        response.data = error_body("invalid-input", "The request is not valid.", exc.detail)
    else:
        response.data = error_body(str(exc.get_codes()).replace("_", "-"), str(exc.detail))
    return response


def query_input(query: QueryDict, *, repeatable: Iterable[str] = ()) -> dict[str, Any]:
    """Return the query as a serializer's data: each parameter's last value, or, for the
    `repeatable` ones, all of them.

    Plain data, not the `QueryDict`: DRF skips an empty value in a `QueryDict` as if it were
    absent, where `?limit=` is a mistake to report.
    """
    many = set(repeatable)
    return {name: values if name in many else values[-1] for name, values in query.lists()}


def _no_route(request: HttpRequest) -> JsonResponse:
    return JsonResponse(error_body("not-found", f"No route matches {request.path!r}."), status=404)


def _slash_route_exists(request: HttpRequest) -> bool:
    if not settings.APPEND_SLASH or request.path_info.endswith("/"):
        return False
    try:
        match = resolve(f"{request.path_info}/", getattr(request, "urlconf", None))
    except Resolver404:
        return False
    return match.func is not api_not_found
