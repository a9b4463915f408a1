"""`/api/sessions/{id}/mcp-servers`: the MCP servers a session's agent uses; add and remove the
session's own. Header values are taken, never shown: a server shows its `headerNames`."""

from typing import Any

from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from agents_app.api.fields import ClosedSerializer, StrictCharField
from agents_app.definitions.mcp_servers import DEFAULT_TIMEOUT_SECONDS, McpServer
from agents_app.mcp.selectors import mcp_server_catalog, session_mcp_server_list
from agents_app.mcp.services import session_mcp_server_add, session_mcp_server_remove
from sessions_app.rest import HelixAPIView

MAX_TIMEOUT_SECONDS = 3600.0


@extend_schema_field(
    {"oneOf": [{"type": "boolean"}, {"type": "array", "items": {"type": "string"}}]}
)
class ApprovalField(serializers.Field):
    """`true`, `false`, or the names of the tools a person approves."""

    default_error_messages = {"invalid": "Give true, false, or a list of tool names."}

    def to_internal_value(self, data: Any) -> bool | list[str]:
        if isinstance(data, bool):
            return data
        if isinstance(data, list) and all(isinstance(name, str) for name in data):
            return data
        self.fail("invalid")

    def to_representation(self, value: Any) -> bool | list[str]:
        return value if isinstance(value, bool) else list(value)


class McpServerOutput(serializers.Serializer):
    name = serializers.CharField()
    transport = serializers.ChoiceField(choices=["streamable-http", "stdio"])
    url = serializers.CharField(help_text="The server's url, or `stdio:` and its command.")
    headerNames = serializers.ListField(child=serializers.CharField())
    allowedTools = serializers.ListField(child=serializers.CharField(), allow_null=True)
    deniedTools = serializers.ListField(child=serializers.CharField())
    needsApproval = ApprovalField(help_text="true, false, or the tools a person approves.")
    timeoutSeconds = serializers.FloatField()
    source = serializers.ChoiceField(
        choices=["agent", "session"], help_text="The agent's definition, or the session's own."
    )


class McpServerListOutput(serializers.Serializer):
    servers = McpServerOutput(many=True)


class McpServerAddedOutput(McpServerOutput):
    state = serializers.ChoiceField(choices=["connecting", "ready", "failed"])
    error = serializers.CharField(allow_null=True)
    tools = serializers.ListField(child=serializers.CharField(), help_text="The tools offered.")


class McpServerListView(HelixAPIView):
    """`GET`: the MCP servers of the session's agent and the session's own; `POST`: add one.

    A session may add servers only if its agent lets it (`mcp_session_servers`), and only
    servers reached by URL. The new server is connected before the answer, which says whether
    that worked and which tools it offers.
    """

    class AddInput(ClosedSerializer):
        name = StrictCharField(max_length=30)
        url = StrictCharField(max_length=2048)
        headers = serializers.DictField(
            child=StrictCharField(allow_blank=True, max_length=8192), default=dict
        )
        allowedTools = serializers.ListField(
            child=StrictCharField(max_length=128), required=False, allow_null=True, default=None
        )
        deniedTools = serializers.ListField(child=StrictCharField(max_length=128), default=list)
        needsApproval = ApprovalField(
            default=False, help_text="true, false, or the names of the tools a person approves."
        )
        timeoutSeconds = serializers.FloatField(
            min_value=0.001, max_value=MAX_TIMEOUT_SECONDS, default=DEFAULT_TIMEOUT_SECONDS
        )

    @extend_schema(responses=McpServerListOutput)
    def get(self, request: Request, session_id: str) -> Response:
        servers = session_mcp_server_list(user=request.user, session_id=session_id)
        body = {"servers": [shown(server, source) for server, source in servers]}
        return Response(McpServerListOutput(body).data)

    @extend_schema(request=AddInput, responses={201: McpServerAddedOutput})
    def post(self, request: Request, session_id: str) -> Response:
        body = self.AddInput(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        server = session_mcp_server_add(
            user=request.user,
            session_id=session_id,
            name=data["name"],
            url=data["url"],
            headers=data["headers"],
            allowed_tools=data["allowedTools"],
            denied_tools=data["deniedTools"],
            needs_approval=data["needsApproval"],
            timeout_seconds=data["timeoutSeconds"],
        )
        catalog = mcp_server_catalog(server)
        added = {
            **shown(server, "session"),
            "state": catalog.state,
            "error": catalog.error,
            "tools": [tool.name for tool in catalog.tools if server.offers(tool.name)],
        }
        return Response(McpServerAddedOutput(added).data, status=status.HTTP_201_CREATED)


class McpServerDetailView(HelixAPIView):
    """`DELETE`: remove one of the session's own MCP servers."""

    @extend_schema(responses={204: None})
    def delete(self, request: Request, session_id: str, name: str) -> Response:
        session_mcp_server_remove(user=request.user, session_id=session_id, name=name)
        return Response(status=status.HTTP_204_NO_CONTENT)


def shown(server: McpServer, source: str) -> dict[str, Any]:
    """Return the server as the API shows it: no header values."""
    return {**server.describe(), "source": source}
