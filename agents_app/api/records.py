"""`/api/sessions/{id}/...` reads: messages, usage, runs, checkpoints and the UI snapshot."""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from agents_app.api.fields import StrictCharField
from agents_app.api.memory_wire import ClosedObject, StrictFloatField, StrictIntegerField
from agents_app.chat.ui_messages import ui_messages
from agents_app.memory.services import session_usage_add
from agents_app.selectors import agent_snapshot
from sessions_app.http import query_input
from sessions_app.rest import HelixAPIView
from sessions_app.selectors import (
    session_checkpoints,
    session_messages,
    session_runs,
    session_search,
    session_usage_entries,
    session_usage_rollup,
    user_search,
)
from sessions_app.stores.rules import MAX_PAGE_SIZE, MAX_POSITION
from sessions_app.usage.rules import MAX_COUNT
from sessions_app.usage.types import UsageKind


class MessagePageOutput(serializers.Serializer):
    messages = serializers.ListField(child=serializers.DictField())
    total = serializers.IntegerField()
    offset = serializers.IntegerField()
    limit = serializers.IntegerField()
    hasMore = serializers.BooleanField()


class MessagesView(HelixAPIView):
    """`GET ?offset&limit`: a page of messages as UI messages.

    `offset`, `limit` and `total` count stored messages; a tool result is part of the UI
    message of the reply that called the tool.
    """

    class MessagesInput(serializers.Serializer):
        offset = serializers.IntegerField(min_value=0, max_value=MAX_POSITION, default=0)
        limit = serializers.IntegerField(min_value=1, max_value=MAX_PAGE_SIZE, default=50)

    @extend_schema(parameters=[MessagesInput], responses=MessagePageOutput)
    def get(self, request: Request, session_id: str) -> Response:
        query = self.MessagesInput(data=query_input(request.query_params))
        query.is_valid(raise_exception=True)
        page = session_messages(user=request.user, session_id=session_id, **query.validated_data)
        body = {
            "messages": ui_messages(page.messages),
            "total": page.total,
            "offset": page.offset,
            "limit": page.limit,
            "hasMore": page.has_more,
        }
        return Response(MessagePageOutput(body).data)


class UsageView(HelixAPIView):
    """`GET ?mode=rollup|entries`: the session's usage summed up, or its entries; `POST`:
    record tokens and cost spent outside a run (reference 002 `addUsage`)."""

    class UsageInput(serializers.Serializer):
        mode = serializers.ChoiceField(choices=["rollup", "entries"], default="rollup")
        runId = StrictCharField(required=False, max_length=255)
        kind = serializers.ListField(
            child=serializers.ChoiceField(choices=UsageKind.choices),
            required=False,
            help_text="With mode=entries: only entries of these kinds.",
        )

    @extend_schema(parameters=[UsageInput], responses=OpenApiTypes.OBJECT)
    def get(self, request: Request, session_id: str) -> Response:
        query = self.UsageInput(data=query_input(request.query_params, repeatable=("kind",)))
        query.is_valid(raise_exception=True)
        data = query.validated_data
        scope = {"user": request.user, "session_id": session_id, "run_id": data.get("runId")}
        if data["mode"] == "rollup":
            return Response(session_usage_rollup(**scope).to_wire())
        entries = session_usage_entries(**scope, kinds=data.get("kind") or None)
        return Response({"entries": [entry.to_wire() for entry in entries]})

    class UsageAddInput(ClosedObject):
        """Tokens and cost spent outside a run."""

        # Half the store's largest count each, so that their total fits it too.
        inputTokens = StrictIntegerField(min_value=0, max_value=MAX_COUNT // 2)
        outputTokens = StrictIntegerField(min_value=0, max_value=MAX_COUNT // 2)
        # Bounded, so that sums of costs stay finite on every database.
        cost = StrictFloatField(required=False, default=0.0, min_value=0, max_value=1e9)

    @extend_schema(request=UsageAddInput, responses={204: None})
    def post(self, request: Request, session_id: str) -> Response:
        body = self.UsageAddInput(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        session_usage_add(
            user=request.user,
            session_id=session_id,
            input_tokens=data["inputTokens"],
            output_tokens=data["outputTokens"],
            cost=data["cost"],
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


class RunOutput(serializers.Serializer):
    runId = serializers.CharField(source="run_id")
    turn = serializers.IntegerField()
    status = serializers.CharField()
    stepCount = serializers.IntegerField(source="step_count")
    error = serializers.CharField(allow_null=True)
    metadata = serializers.DictField()
    startedAt = serializers.DateTimeField(source="started_at")
    completedAt = serializers.DateTimeField(source="completed_at", allow_null=True)


class RunListOutput(serializers.Serializer):
    runs = RunOutput(many=True)


class RunsView(HelixAPIView):
    """`GET`: the session's runs by turn."""

    @extend_schema(responses=RunListOutput)
    def get(self, request: Request, session_id: str) -> Response:
        runs = session_runs(user=request.user, session_id=session_id)
        return Response(RunListOutput({"runs": runs}).data)


class CheckpointOutput(serializers.Serializer):
    checkpointId = serializers.CharField(source="checkpoint_id")
    runId = serializers.CharField(source="run_id", allow_null=True)
    stepId = serializers.CharField(source="step_id")
    stepCount = serializers.IntegerField(source="step_count")
    messageCount = serializers.IntegerField(source="message_count")
    streamSequence = serializers.IntegerField(source="stream_sequence")
    createdAt = serializers.DateTimeField(source="created_at")


class CheckpointListOutput(serializers.Serializer):
    checkpoints = CheckpointOutput(many=True)


class CheckpointsView(HelixAPIView):
    """`GET ?limit`: the session's checkpoints, newest first."""

    class CheckpointsInput(serializers.Serializer):
        limit = serializers.IntegerField(min_value=1, max_value=MAX_PAGE_SIZE, required=False)

    @extend_schema(parameters=[CheckpointsInput], responses=CheckpointListOutput)
    def get(self, request: Request, session_id: str) -> Response:
        query = self.CheckpointsInput(data=query_input(request.query_params))
        query.is_valid(raise_exception=True)
        checkpoints = session_checkpoints(
            user=request.user, session_id=session_id, limit=query.validated_data.get("limit")
        )
        return Response(CheckpointListOutput({"checkpoints": checkpoints}).data)


class SnapshotView(HelixAPIView):
    """`GET`: the UI snapshot of reference 001, from one commit (see `agent_snapshot`)."""

    @extend_schema(responses=OpenApiTypes.OBJECT)
    def get(self, request: Request, session_id: str) -> Response:
        snapshot = agent_snapshot(user=request.user, session_id=session_id)
        session = snapshot.session
        body = {
            "runId": snapshot.run_id,
            "messages": snapshot.messages,
            "state": snapshot.state,
            "streamSequence": snapshot.stream_sequence,
            "status": snapshot.stream_status,
            "timestamp": int(snapshot.taken_at.timestamp() * 1000),
            "agentType": session.agent_type,
            "version": session.version,
        }
        optional = {
            "error": session.error,
            "interruptContext": session.interrupt_context,
            "pendingClientToolCalls": session.pending_client_tool_calls,
            "clientToolCallOwnership": session.client_tool_call_ownership,
            "completedClientToolCalls": session.completed_client_tool_calls,
            "rootSessionId": session.root_session_id,
            "parentSessionId": session.parent_session_id,
        }
        body |= {key: value for key, value in optional.items() if value}
        return Response(body)


class SearchHitOutput(serializers.Serializer):
    id = serializers.CharField(source="message_id")
    sessionId = serializers.CharField(source="session_id")
    role = serializers.CharField()
    content = serializers.CharField()
    createdAt = serializers.DateTimeField(source="created_at")


class SearchOutput(serializers.Serializer):
    results = SearchHitOutput(many=True)


class SearchInput(serializers.Serializer):
    q = StrictCharField(max_length=1000, help_text="Words to look for; English stems match.")
    limit = serializers.IntegerField(min_value=1, max_value=MAX_PAGE_SIZE, default=20)


class SessionSearchView(HelixAPIView):
    """`GET ?q&limit`: the session's messages holding `q` as a phrase, best first."""

    @extend_schema(parameters=[SearchInput], responses=SearchOutput)
    def get(self, request: Request, session_id: str) -> Response:
        query = SearchInput(data=query_input(request.query_params))
        query.is_valid(raise_exception=True)
        hits = session_search(
            user=request.user,
            session_id=session_id,
            query=query.validated_data["q"],
            limit=query.validated_data["limit"],
        )
        return Response(SearchOutput({"results": hits}).data)


class SearchView(HelixAPIView):
    """`GET ?q&limit`: messages of all the caller's sessions holding every word of `q`."""

    @extend_schema(operation_id="search", parameters=[SearchInput], responses=SearchOutput)
    def get(self, request: Request) -> Response:
        query = SearchInput(data=query_input(request.query_params))
        query.is_valid(raise_exception=True)
        hits = user_search(
            user=request.user,
            query=query.validated_data["q"],
            limit=query.validated_data["limit"],
        )
        return Response(SearchOutput({"results": hits}).data)
