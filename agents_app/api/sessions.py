"""`/api/sessions/`: list, create, read, relabel and delete the caller's sessions."""

from typing import get_args

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from agents_app.api.fields import ClosedSerializer, MetadataField, StrictCharField, TagsField
from agents_app.memory.services import session_update
from agents_app.runs.services import agent_session_create
from sessions_app.http import query_input
from sessions_app.rest import HelixAPIView
from sessions_app.selectors import session_for_user, session_list
from sessions_app.stores.rules import MAX_IDENTIFIER_LENGTH, MAX_PAGE_SIZE, MAX_POSITION
from sessions_app.stores.types import SessionOrdering, SessionStatus
from streams_app.services import session_delete

LABELS = {"tags": "tags", "metadata": "metadata", "expiresAt": "expires_at"}
# A session's name, model and source (`rules.check_name`).
MAX_NAME_LENGTH = MAX_IDENTIFIER_LENGTH


class SessionSummaryOutput(serializers.Serializer):
    sessionId = serializers.CharField(source="session_id")
    agentType = serializers.CharField(source="agent_type")
    status = serializers.ChoiceField(choices=SessionStatus.choices)
    stepCount = serializers.IntegerField(source="step_count")
    messageCount = serializers.IntegerField(source="message_count")
    parentSessionId = serializers.CharField(source="parent_session_id", allow_null=True)
    rootSessionId = serializers.CharField(source="root_session_id", allow_null=True)
    userId = serializers.CharField(source="user_id", allow_null=True)
    name = serializers.CharField(allow_null=True)
    model = serializers.CharField(allow_null=True)
    source = serializers.CharField(allow_null=True)
    tags = TagsField()
    metadata = MetadataField()
    expiresAt = serializers.DateTimeField(source="expires_at", allow_null=True)
    version = serializers.IntegerField()
    createdAt = serializers.DateTimeField(source="created_at")
    updatedAt = serializers.DateTimeField(source="updated_at")


class SessionOutput(SessionSummaryOutput):
    streamId = serializers.CharField(source="stream_id")
    state = serializers.JSONField(source="custom_state", allow_null=True)
    output = serializers.JSONField(allow_null=True)
    error = serializers.CharField(allow_null=True)
    failureReason = serializers.CharField(source="failure_reason", allow_null=True)
    aborted = serializers.BooleanField()
    abortReason = serializers.CharField(source="abort_reason", allow_null=True)
    resumeCount = serializers.IntegerField(source="resume_count")


class SessionPageOutput(serializers.Serializer):
    results = SessionSummaryOutput(many=True, source="sessions")
    total = serializers.IntegerField()
    offset = serializers.IntegerField()
    limit = serializers.IntegerField()
    hasMore = serializers.BooleanField(source="has_more")


class SessionListView(HelixAPIView):
    """`GET` the caller's sessions, filtered and paged; `POST` a new one."""

    class ListInput(serializers.Serializer):
        agentType = StrictCharField(required=False, max_length=255)
        status = serializers.ListField(
            child=serializers.ChoiceField(choices=SessionStatus.choices), required=False
        )
        userId = StrictCharField(required=False, max_length=255)
        tags = TagsField(required=False, help_text="Sessions holding every one of these tags.")
        metadata = serializers.ListField(
            child=serializers.RegexField(r"^[^=]+=", max_length=10_000, trim_whitespace=False),
            required=False,
            help_text="`key=value` pairs the session's metadata must all hold.",
        )
        createdAfter = serializers.DateTimeField(required=False)
        createdBefore = serializers.DateTimeField(required=False)
        updatedAfter = serializers.DateTimeField(required=False)
        updatedBefore = serializers.DateTimeField(required=False)
        orderBy = serializers.ChoiceField(choices=get_args(SessionOrdering), default="-created_at")
        offset = serializers.IntegerField(min_value=0, max_value=MAX_POSITION, default=0)
        limit = serializers.IntegerField(min_value=1, max_value=MAX_PAGE_SIZE, default=50)

    class CreateInput(serializers.Serializer):
        agentType = StrictCharField(max_length=255)
        userId = StrictCharField(required=False, max_length=255)
        tags = TagsField(required=False, default=list)
        metadata = MetadataField(required=False, default=dict)
        expiresAt = serializers.DateTimeField(required=False, allow_null=True)
        name = StrictCharField(required=False, allow_blank=True, max_length=MAX_NAME_LENGTH)
        model = StrictCharField(required=False, max_length=MAX_NAME_LENGTH)
        source = StrictCharField(required=False, max_length=MAX_NAME_LENGTH)
        parentSessionId = StrictCharField(
            required=False,
            max_length=MAX_IDENTIFIER_LENGTH,
            help_text="One of the caller's sessions this one continues.",
        )

    @extend_schema(
        operation_id="sessions_list", parameters=[ListInput], responses=SessionPageOutput
    )
    def get(self, request: Request) -> Response:
        query = self.ListInput(
            data=query_input(request.query_params, repeatable=("status", "tags", "metadata"))
        )
        query.is_valid(raise_exception=True)
        data = query.validated_data
        page = session_list(
            user=request.user,
            agent_type=data.get("agentType"),
            status=data.get("status") or None,
            user_id=data.get("userId"),
            tags=data.get("tags") or None,
            metadata=dict(pair.split("=", 1) for pair in data.get("metadata", [])) or None,
            created_after=data.get("createdAfter"),
            created_before=data.get("createdBefore"),
            updated_after=data.get("updatedAfter"),
            updated_before=data.get("updatedBefore"),
            order_by=data["orderBy"],
            offset=data["offset"],
            limit=data["limit"],
        )
        return Response(SessionPageOutput(page).data)

    @extend_schema(
        operation_id="sessions_create", request=CreateInput, responses={201: SessionOutput}
    )
    def post(self, request: Request) -> Response:
        body = self.CreateInput(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        state = agent_session_create(
            user=request.user,
            agent_type=data["agentType"],
            user_id=data.get("userId"),
            tags=data["tags"],
            metadata=data["metadata"],
            expires_at=data.get("expiresAt"),
            name=data.get("name"),
            model=data.get("model"),
            source=data.get("source"),
            parent_session_id=data.get("parentSessionId"),
        )
        return Response(SessionOutput(state).data, status=status.HTTP_201_CREATED)


class SessionDetailView(HelixAPIView):
    """`GET` one of the caller's sessions, `PATCH` its name and labels, or `DELETE` it."""

    class PatchInput(ClosedSerializer):
        """What to change: name, tags, metadata and expiresAt, nothing else.

        A rename alone leaves the version as it is; labels bump it.
        """

        unknown_field_message = "Only name, tags, metadata and expiresAt can be changed."

        name = StrictCharField(required=False, allow_blank=True, max_length=MAX_NAME_LENGTH)
        tags = TagsField(required=False)
        metadata = MetadataField(required=False)
        expiresAt = serializers.DateTimeField(required=False, allow_null=True)

    @extend_schema(responses=SessionOutput)
    def get(self, request: Request, session_id: str) -> Response:
        state = session_for_user(session_id=session_id, user=request.user)
        return Response(SessionOutput(state).data)

    @extend_schema(request=PatchInput, responses=SessionOutput)
    def patch(self, request: Request, session_id: str) -> Response:
        body = self.PatchInput(data=request.data)
        body.is_valid(raise_exception=True)
        changes = dict(body.validated_data)
        name = changes.pop("name", None)
        labels = {LABELS[field]: value for field, value in changes.items()}
        state = session_update(user=request.user, session_id=session_id, labels=labels, name=name)
        return Response(SessionOutput(state).data)

    @extend_schema(responses={204: None})
    def delete(self, request: Request, session_id: str) -> Response:
        session_delete(user=request.user, session_id=session_id)
        return Response(status=status.HTTP_204_NO_CONTENT)
