"""`/api/chat`: the unified chat routes, answering in the AI SDK's UI message stream protocol.

A stock `useChat` front end works against them: its default transport posts to `/api/chat`
and re-attaches with `GET /api/chat/{id}/stream` (204 when no run is executing).
"""

from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from agents_app.api.fields import StrictCharField, StrictRegexField
from agents_app.api.runs import ReasonInput
from agents_app.chat.service import (
    ChatRun,
    chat_following,
    chat_interrupt,
    chat_regenerate,
    chat_send,
)
from agents_app.chat.ui_stream import HEADERS, failed_stream, ui_message_stream
from agents_app.runs.throttles import RunStartThrottle
from sessions_app.conf import helix_setting
from sessions_app.converters import SessionIdConverter
from sessions_app.http import error_body
from sessions_app.rest import HelixAPIView
from streams_app.backends import get_stream_manager

# One event of a UI message stream: a UI message chunk as JSON, or `[DONE]` at the end.
UI_MESSAGE_STREAM = {
    (200, "text/event-stream"): inline_serializer(
        "UIMessageStreamEvent",
        fields={
            "data": serializers.CharField(help_text="A UI message chunk as JSON, or [DONE]."),
            "event": serializers.CharField(required=False),
            "id": serializers.CharField(required=False),
        },
    )
}


def ui_message_response(run: ChatRun) -> StreamingHttpResponse:
    """Answer with the run's chunks as a UI message stream, from the run's first chunk."""
    manager = get_stream_manager()
    reader = manager.create_resumable_reader(run.stream_id, run.from_sequence)
    if reader is None:
        info = manager.get_stream_info(run.stream_id)
        events = failed_stream(run.run_id, info.error or "The run failed.")
    else:
        heartbeat = helix_setting("SSE_HEARTBEAT_SECONDS", 30)
        events = ui_message_stream(reader, run.run_id, run.session_id, heartbeat)
    return StreamingHttpResponse(events, content_type="text/event-stream", headers=HEADERS)


class ChatView(HelixAPIView):
    """`POST`: send the chat's new message, or resume it, or attach to its executing run."""

    throttle_classes = [RunStartThrottle]

    class ChatInput(serializers.Serializer):
        id = StrictRegexField(f"^{SessionIdConverter.regex}$", help_text="The chat id.")
        messages = serializers.ListField(child=serializers.DictField(), default=list)
        trigger = serializers.ChoiceField(
            choices=["submit-message", "regenerate-message"],
            default="submit-message",
            help_text="`regenerate-message` answers the last user message again, on a branch.",
        )
        messageId = StrictCharField(required=False, allow_null=True, max_length=255)
        agentType = StrictCharField(
            required=False, max_length=255, help_text="Needed when the chat is new."
        )
        resume = serializers.BooleanField(
            default=False, help_text="Resume the chat's interrupted run instead of sending."
        )

    @extend_schema(operation_id="chat_send", request=ChatInput, responses=UI_MESSAGE_STREAM)
    def post(self, request: Request) -> StreamingHttpResponse:
        body = self.ChatInput(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        if data["trigger"] == "regenerate-message":
            run = chat_regenerate(user=request.user, chat_id=data["id"])
        else:
            run = chat_send(
                user=request.user,
                chat_id=data["id"],
                messages=data["messages"],
                agent_type=data.get("agentType"),
                resume=data["resume"],
            )
        return ui_message_response(run)


class ChatStreamView(HelixAPIView):
    """`GET`: re-attach to the chat's executing run, from its first chunk; 204 if none."""

    @extend_schema(responses={**UI_MESSAGE_STREAM, 204: None})
    def get(self, request: Request, session_id: str) -> StreamingHttpResponse | Response:
        run = chat_following(user=request.user, chat_id=session_id)
        if run is None:
            return Response(status=status.HTTP_204_NO_CONTENT)
        return ui_message_response(run)


class ChatInterruptView(HelixAPIView):
    """`POST {reason}`: raise the durable interrupt flag; 202 once the run has stopped.

    504 when the run has not stopped within `HELIX["INTERRUPT_OBSERVATION_SECONDS"]`; the
    flag stays raised, and the run stops when it next looks.
    """

    @extend_schema(request=ReasonInput, responses={202: None, 504: OpenApiTypes.OBJECT})
    def post(self, request: Request, session_id: str) -> Response:
        body = ReasonInput(data=request.data)
        body.is_valid(raise_exception=True)
        reason = body.validated_data.get("reason")
        if chat_interrupt(user=request.user, chat_id=session_id, reason=reason):
            return Response(status=status.HTTP_202_ACCEPTED)
        message = "The run has not stopped yet; it will when it next looks at the flag."
        return Response(
            error_body("interrupt-not-observed", message), status=status.HTTP_504_GATEWAY_TIMEOUT
        )
