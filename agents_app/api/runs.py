"""`/api/sessions/{id}/...`: start, resume, retry, interrupt and abort runs; read their status.

Request and response shapes are reference 001's (`StartAgentRequestV2`, `ResumeAgentRequestV2`,
`AgentStatusResponse`), with the session id in the path.
"""

from django.urls import reverse
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from agents_app.api.fields import MetadataField, StrictCharField, TagsField
from agents_app.definitions.inputs import RunInput
from agents_app.runs.launch import StartedRun
from agents_app.runs.services import (
    agent_abort,
    agent_interrupt,
    agent_resume,
    agent_retry,
    agent_start,
)
from agents_app.runs.throttles import RunStartThrottle
from agents_app.selectors import agent_status
from sessions_app.openapi import pydantic_schema
from sessions_app.rest import HelixAPIView
from streams_app.routing import websocket_path


@extend_schema_field(pydantic_schema(RunInput))
class RunInputField(serializers.JSONField):
    """A string, or user messages with metadata and files (`agents_app.definitions.inputs`
    checks them)."""


class StartedOutput(serializers.Serializer):
    sessionId = serializers.CharField()
    streamId = serializers.CharField()
    runId = serializers.CharField()
    streamUrl = serializers.CharField()
    websocketUrl = serializers.CharField()
    status = serializers.ChoiceField(
        choices=["started", "queued"],
        help_text="`queued`: it begins when the session's running run ends (RUN_CONCURRENCY).",
    )


def started(request: Request, run: StartedRun) -> Response:
    """Answer a started run with where to follow it."""
    stream_path = reverse("session-stream", args=[run.session_id])
    scheme = "wss" if request.is_secure() else "ws"
    body = {
        "sessionId": run.session_id,
        "streamId": run.stream_id,
        "runId": run.run_id,
        "streamUrl": request.build_absolute_uri(stream_path),
        "websocketUrl": f"{scheme}://{request.get_host()}{websocket_path(run.session_id)}",
        "status": "queued" if run.queued else "started",
    }
    return Response(StartedOutput(body).data, status=status.HTTP_202_ACCEPTED)


class StartView(HelixAPIView):
    """`POST`: start a run on the session, creating the session if it does not exist."""

    throttle_classes = [RunStartThrottle]

    class StartInput(serializers.Serializer):
        class RunInput(serializers.Serializer):
            message = RunInputField()

        agentType = StrictCharField(max_length=255)
        input = RunInput()
        userId = StrictCharField(required=False, max_length=255)
        tags = TagsField(required=False, default=list)
        metadata = MetadataField(required=False, default=dict)

    @extend_schema(request=StartInput, responses={202: StartedOutput})
    def post(self, request: Request, session_id: str) -> Response:
        body = self.StartInput(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        run = agent_start(
            user=request.user,
            session_id=session_id,
            agent_type=data["agentType"],
            message=data["input"]["message"],
            user_id=data.get("userId"),
            tags=data["tags"],
            metadata=data["metadata"],
        )
        return started(request, run)


class ResumeView(HelixAPIView):
    """`POST`: resume an interrupted session in a new run."""

    throttle_classes = [RunStartThrottle]

    class ResumeInput(serializers.Serializer):
        class ResumeOptions(serializers.Serializer):
            mode = serializers.ChoiceField(
                choices=["continue", "retry", "branch"], default="continue"
            )
            checkpointId = StrictCharField(required=False, max_length=255)
            modifyState = serializers.DictField(required=False)
            appendMessages = RunInputField(required=False)

        agentType = StrictCharField(required=False, max_length=255)
        options = ResumeOptions(required=False)

    @extend_schema(request=ResumeInput, responses={202: StartedOutput})
    def post(self, request: Request, session_id: str) -> Response:
        body = self.ResumeInput(data=request.data)
        body.is_valid(raise_exception=True)
        options = body.validated_data.get("options", {})
        run = agent_resume(
            user=request.user,
            session_id=session_id,
            mode=options.get("mode", "continue"),
            checkpoint_id=options.get("checkpointId"),
            modify_state=options.get("modifyState"),
            append_messages=options.get("appendMessages") or (),
        )
        return started(request, run)


class RetryView(HelixAPIView):
    """`POST`: run a failed session again from its last checkpoint."""

    throttle_classes = [RunStartThrottle]

    @extend_schema(request=None, responses={202: StartedOutput})
    def post(self, request: Request, session_id: str) -> Response:
        return started(request, agent_retry(user=request.user, session_id=session_id))


class ReasonInput(serializers.Serializer):
    reason = StrictCharField(required=False, allow_blank=True, max_length=1000)


class InterruptView(HelixAPIView):
    """`POST {reason}`: raise the durable interrupt flag; the running step stops and commits."""

    @extend_schema(request=ReasonInput, responses={202: None})
    def post(self, request: Request, session_id: str) -> Response:
        body = ReasonInput(data=request.data)
        body.is_valid(raise_exception=True)
        reason = body.validated_data.get("reason")
        agent_interrupt(user=request.user, session_id=session_id, reason=reason)
        return Response(status=status.HTTP_202_ACCEPTED)


class AbortView(HelixAPIView):
    """`POST {reason}`: end the session's run for good."""

    @extend_schema(request=ReasonInput, responses={202: None})
    def post(self, request: Request, session_id: str) -> Response:
        body = ReasonInput(data=request.data)
        body.is_valid(raise_exception=True)
        agent_abort(
            user=request.user, session_id=session_id, reason=body.validated_data.get("reason")
        )
        return Response(status=status.HTTP_202_ACCEPTED)


class StatusOutput(serializers.Serializer):
    sessionId = serializers.CharField(source="session_id")
    status = serializers.CharField()
    stepCount = serializers.IntegerField(source="step_count")
    output = serializers.JSONField(allow_null=True)
    error = serializers.CharField(allow_null=True)
    checkpointId = serializers.CharField(source="checkpoint_id", allow_null=True)
    isExecuting = serializers.BooleanField(source="is_executing")


class StatusView(HelixAPIView):
    """`GET`: the session's status (reference 001 `AgentStatusResponse`)."""

    @extend_schema(responses=StatusOutput)
    def get(self, request: Request, session_id: str) -> Response:
        return Response(StatusOutput(agent_status(user=request.user, session_id=session_id)).data)
