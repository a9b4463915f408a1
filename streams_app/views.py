"""Server-sent events of a session's stream: `GET /api/sessions/{session_id}/stream`.

Each chunk event is one SSE event whose `id:` is its sequence, so a reconnecting EventSource
resumes by itself (`Last-Event-ID`); `?fromSequence=` resumes explicitly. A comment line keeps
idle connections alive every `HELIX["SSE_HEARTBEAT_SECONDS"]`. The response ends after the
`end` or `fail` event.
"""

import json
from collections.abc import AsyncIterator

from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from sessions_app.auth import arequest_user
from sessions_app.conf import helix_setting
from sessions_app.errors import HelixError
from sessions_app.http import error_body, error_response, require_methods
from sessions_app.selectors import asession_for_user
from streams_app.backends import get_stream_manager
from streams_app.backends.reader import StreamReader
from streams_app.backends.types import ChunkEvent, FailEvent, ResyncEvent, StreamEvent
from streams_app.metrics import CLIENTS
from streams_app.resume import resume_point

HEARTBEAT = b": heartbeat\n\n"


@csrf_exempt  # Only GET gets through, which CSRF never checks; a refusal would be HTML.
@require_methods("GET")
async def stream_events(request: HttpRequest, session_id: str) -> HttpResponse:
    """Stream the session's events to its owner as server-sent events."""
    user = await arequest_user(request)
    if not user.is_authenticated:
        body = error_body("not-authenticated", "Authentication credentials were not provided.")
        return JsonResponse(body, status=401)
    try:
        session = await asession_for_user(session_id=session_id, user=user)
        from_sequence = resume_point(
            from_sequence=request.GET.get("fromSequence"),
            last_event_id=request.headers.get("Last-Event-ID"),
        )
    except HelixError as error:
        return error_response(error)
    manager = get_stream_manager()
    reader = await manager.acreate_resumable_reader(session.stream_id, from_sequence)
    if reader is None:
        info = await manager.aget_stream_info(session.stream_id)
        body = _sse_event(FailEvent(info.error or "The stream failed."))
        events: AsyncIterator[bytes] = _once(body)
    else:
        events = _sse_stream(reader, helix_setting("SSE_HEARTBEAT_SECONDS", 30))
    response = StreamingHttpResponse(events, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


async def _sse_stream(reader: StreamReader, heartbeat: float) -> AsyncIterator[bytes]:
    CLIENTS.labels("sse").inc()
    try:
        while not reader.finished:
            events = await reader.next_events(timeout=heartbeat)
            yield b"".join(_sse_event(event) for event in events) if events else HEARTBEAT
    finally:
        CLIENTS.labels("sse").dec()
        await reader.aclose()


async def _once(body: bytes) -> AsyncIterator[bytes]:
    yield body


def _sse_event(event: StreamEvent) -> bytes:
    """Return one event in SSE framing; chunk and resync events carry the sequence as `id`."""
    data = f"data: {json.dumps(event.to_wire())}\n\n"
    if isinstance(event, ChunkEvent):
        return f"id: {event.sequence}\n{data}".encode()
    if isinstance(event, ResyncEvent):
        return f"id: {event.from_sequence}\n{data}".encode()
    return data.encode()
