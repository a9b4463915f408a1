"""Middleware of the API surface."""

import contextlib
from collections.abc import Callable

from asgiref.sync import iscoroutinefunction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.decorators import sync_and_async_middleware

from sessions_app.conf import helix_setting
from sessions_app.errors import InvalidJSON
from sessions_app.http import error_body
from sessions_app.parsers import json_loads, may_hold_unstorable
from sessions_app.storable import unstorable_character, unstorable_text


@sync_and_async_middleware
def api_request_guard(get_response: Callable) -> Callable:
    """Refuse, in the error shape, an API request no view should see.

    413 for a body over ``HELIX["MAX_REQUEST_BYTES"]`` (16 MiB unless set; 0 or None for no
    limit), by its `Content-Length`, or what arrived when there is none (a chunked request);
    400 for a NUL character anywhere in the query or in a JSON body's keys and strings, which
    PostgreSQL cannot store, or an unpaired surrogate, which neither database can, so that no
    input is half accepted on one database and a server error on another.
    """

    if iscoroutinefunction(get_response):

        async def middleware(request: HttpRequest) -> HttpResponse:
            return _refusal(request) or await get_response(request)

    else:

        def middleware(request: HttpRequest) -> HttpResponse:
            return _refusal(request) or get_response(request)

    return middleware


def _refusal(request: HttpRequest) -> HttpResponse | None:
    if not request.path.startswith("/api/"):
        return None
    return _too_large(request) or _unstorable(request)


def _too_large(request: HttpRequest) -> HttpResponse | None:
    limit = helix_setting("MAX_REQUEST_BYTES", 16 * 1024 * 1024)
    if not limit:
        return None
    length = request.META.get("CONTENT_LENGTH")
    size = int(length) if length and length.isdigit() else len(request.body)
    if size <= limit:
        return None
    message = f"The request body is {size} bytes, more than the limit of {limit}."
    return JsonResponse(
        error_body("request-too-large", message, {"limit": limit, "size": size}), status=413
    )


def _unstorable(request: HttpRequest) -> HttpResponse | None:
    where, kind = "query", unstorable_character(dict(request.GET.lists()))
    if kind is None and request.content_type == "application/json":
        where = "body"
        if may_hold_unstorable(request.body):
            with contextlib.suppress(InvalidJSON):  # Not JSON: the view's parser says so.
                kind = unstorable_character(json_loads(request.body))
    if kind is None:
        return None
    return JsonResponse(
        error_body("invalid-input", f"The {where} holds {unstorable_text(kind)}.", {where: kind}),
        status=400,
    )
