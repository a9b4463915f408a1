"""Admin for the MCP servers sessions added: browse and delete; header values never show."""

from django.contrib import admin
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest

from agents_app.admin_inputs import StorableInputsAdmin
from agents_app.mcp.models import SessionMcpServer
from agents_app.mcp.services import announce_change


@admin.register(SessionMcpServer)
class SessionMcpServerAdmin(StorableInputsAdmin):
    list_display = ("name", "session", "url", "header_names", "created_at")
    list_select_related = ("session",)
    search_fields = ("name", "url", "session__id")
    ordering = ("-created_at",)
    # `headers` is left out: its values may be secrets.
    fields = (
        "session",
        "name",
        "url",
        "header_names",
        "allowed_tools",
        "denied_tools",
        "needs_approval",
        "approval_tools",
        "timeout_seconds",
        "created_at",
    )
    readonly_fields = fields

    @admin.display(description="headers (names only)")
    def header_names(self, server: SessionMcpServer) -> str:
        return ", ".join(server.header_names) or "-"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def delete_model(self, request: HttpRequest, obj: SessionMcpServer) -> None:
        super().delete_model(request, obj)
        transaction.on_commit(lambda: announce_change(obj.session_id))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet) -> None:
        sessions = set(queryset.values_list("session_id", flat=True))
        super().delete_queryset(request, queryset)
        for session_id in sessions:
            transaction.on_commit(lambda s=session_id: announce_change(s))
