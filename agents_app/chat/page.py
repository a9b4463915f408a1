"""The chat page: `/chat/{agent_type}/` starts a conversation, `/chat/{agent_type}/{id}/`
continues one.

The page is `helix/chat/page.html` around `helix/chat/widget.html` (in `agents_app/templates/`),
which any template can include; `static/helix/chat.js` does the talking, through the REST API
and the session's WebSockets. Who may frame the page is ``HELIX["CHAT_FRAME_ANCESTORS"]``.
"""

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_safe

from agents_app.definitions.registry import get_registry
from sessions_app.conf import helix_setting
from sessions_app.errors import SessionNotFound
from sessions_app.selectors import session_for_user


@require_safe
@login_required
def chat_page(request: HttpRequest, agent_type: str, session_id: str | None = None) -> HttpResponse:
    """Render the chat with an agent, on the user's session `session_id` or on a new one."""
    if not get_registry().has(agent_type):
        raise Http404(f"No agent of type {agent_type!r}.")
    if session_id is not None:
        try:
            session = session_for_user(session_id=session_id, user=request.user)
        except SessionNotFound:
            raise Http404(f"No session {session_id!r}.") from None
        if session.agent_type != agent_type:
            raise Http404(f"No session {session_id!r}.")
    context = {"agent_type": agent_type, "session_id": session_id}
    return with_frame_policy(render(request, "helix/chat/page.html", context))


def with_frame_policy(response: HttpResponse) -> HttpResponse:
    """Let the pages ``HELIX["CHAT_FRAME_ANCESTORS"]`` names frame `response`, and no others.

    `Content-Security-Policy: frame-ancestors` decides in browsers that know it; the older
    `X-Frame-Options` says as much as it can: `DENY` (the project's default) for no ancestor,
    `SAMEORIGIN` for `'self'` alone, and nothing (so no refusal) for any other list.
    """
    sources = helix_setting("CHAT_FRAME_ANCESTORS", ["'self'"]) or ["'none'"]
    response["Content-Security-Policy"] = "frame-ancestors " + " ".join(sources)
    if sources == ["'self'"]:
        response["X-Frame-Options"] = "SAMEORIGIN"
    elif sources != ["'none'"]:
        response.xframe_options_exempt = True
    return response
