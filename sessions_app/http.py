"""Domain errors as HTTP responses: one JSON body shape for every API surface.

`{"error": {"code": "...", "message": "...", "details": {...}}}`, with the status each
`HelixError` subclass declares (a lifecycle hook's refusal answers with its own body instead).
DRF views use `exception_handler`; plain Django views (the SSE stream) use `error_response`.
"""

from collections.abc import Iterable
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse, QueryDict
from django.views import defaults
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
        return JsonResponse(
            error_body("not-found", f"No route matches {request.path!r}."), status=404
        )
    return defaults.page_not_found(request, exception)


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
