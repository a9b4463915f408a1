"""The MCP servers a session added while it lives (the agent's own are in its definition)."""

from django.db import models
from django.utils import timezone

from agents_app.definitions.mcp_servers import DEFAULT_TIMEOUT_SECONDS, McpServer
from sessions_app.models import AgentSession


class SessionMcpServer(models.Model):
    """An MCP server reached over streamable HTTP that one session's agent uses.

    `headers` may hold secrets (API keys, bearer tokens): nothing shows their values; the API,
    the admin and the WebSocket frames show `header_names` only.
    """

    session = models.ForeignKey(
        AgentSession, on_delete=models.DB_CASCADE, related_name="mcp_servers", db_index=False
    )
    name = models.CharField(max_length=30)
    url = models.CharField(max_length=2048)
    headers = models.JSONField(
        default=dict, blank=True, help_text="Sent with every request; never shown."
    )
    allowed_tools = models.JSONField(null=True, blank=True)
    denied_tools = models.JSONField(default=list, blank=True)
    needs_approval = models.BooleanField(
        default=False, help_text="Whether a person approves every call of the server's tools."
    )
    approval_tools = models.JSONField(
        default=list, blank=True, help_text="The tools a person approves each call of."
    )
    timeout_seconds = models.FloatField(default=DEFAULT_TIMEOUT_SECONDS)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = "session MCP server"
        constraints = [
            models.UniqueConstraint(fields=["session", "name"], name="session_mcp_server_name"),
        ]

    def __str__(self) -> str:
        return f"MCP server {self.name} of session {self.session_id}"

    @property
    def header_names(self) -> list[str]:
        """Return the names of the headers, sorted; never their values."""
        return sorted(self.headers or {})

    def as_server(self) -> McpServer:
        """Return the server as agents use it."""
        return McpServer(
            name=self.name,
            url=self.url,
            headers=self.headers or {},
            allowed_tools=self.allowed_tools,
            denied_tools=self.denied_tools or (),
            needs_approval=True if self.needs_approval else (self.approval_tools or ()),
            timeout_seconds=self.timeout_seconds,
        )
