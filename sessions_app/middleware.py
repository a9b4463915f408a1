"""Middleware of the API surface."""

from collections.abc import Callable

from asgiref.sync import iscoroutinefunction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.decorators import sync_and_async_middleware

from sessions_app.conf import helix_setting
from sessions_app.http import error_body


@sync_and_async_middleware
def request_body_limit(get_response: Callable) -> Callable:
    """Answer 413 in the error shape to an API request whose body is over the limit.

    The limit is ``HELIX["MAX_REQUEST_BYTES"]``; the body's size is its `Content-Length`, or
    what arrived when there is none (a chunked request).
    """

    if iscoroutinefunction(get_response):

        async def middleware(request: HttpRequest) -> HttpResponse:
            return _refusal(request) or await get_response(request)

    else:

        def middleware(request: HttpRequest) -> HttpResponse:
            return _refusal(request) or get_response(request)

    return middleware


def _refusal(request: HttpRequest) -> HttpResponse | None:
    limit = helix_setting("MAX_REQUEST_BYTES")
    if not limit or not request.path.startswith("/api/"):
        return None
    length = request.META.get("CONTENT_LENGTH")
    size = int(length) if length and length.isdigit() else len(request.body)
    if size <= limit:
        return None
    message = f"The request body is {size} bytes, more than the limit of {limit}."
    return JsonResponse(
        error_body("request-too-large", message, {"limit": limit, "size": size}), status=413
    )
