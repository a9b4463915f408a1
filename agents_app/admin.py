"""Django admin for agent sessions: browse, inspect, and clean up.

It lives in `agents_app`, not `sessions_app`, because its actions call run control and delete
streams, which sit above the durable record (DESIGN: agents_app -> streams_app -> sessions_app).
The list stays fast on a large table: no per-row queries, large JSON fields deferred, and no
full count. The detail page is read-only; actions call the services in
`agents_app.operations.services` and `agents_app.operations.reaping`.
"""

from datetime import datetime, timedelta
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import ActionLocation
from django.core.paginator import Paginator
from django.db import connection
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.functional import cached_property

import agents_app.mcp.admin  # noqa: F401  (the admin of the MCP servers sessions add)
from agents_app.admin_inputs import StorableInputsAdmin
from agents_app.definitions.registry import get_registry
from agents_app.operations.reaping import reap_expired_sessions
from agents_app.operations.services import sessions_delete, sessions_interrupt, sessions_mark_failed
from sessions_app.models import AgentSession, Checkpoint, Message, Run, SubSessionRef
from sessions_app.stores import get_session_store
from sessions_app.usage import get_usage_store
from streams_app.models import Stream, StreamChunk

# Fields the list never shows; some hold megabytes.
DEFERRED_FIELDS = (
    "custom_state",
    "output",
    "error",
    "abort_reason",
    "pending_client_tool_calls",
    "completed_client_tool_calls",
    "client_tool_call_ownership",
    "interrupt_context",
    "suspension_context",
    "tracing_context",
    "metadata",
    "tags",
)
# How much of a session the detail page shows at once.
MESSAGES_SHOWN = 500
CHECKPOINTS_SHOWN = 50
CHUNKS_PER_PAGE = 100


class EstimatedCountPaginator(Paginator):
    """A paginator that takes PostgreSQL's row estimate for the whole table instead of counting.

    A filtered list, and every list on SQLite, is counted exactly.
    """

    @cached_property
    def count(self) -> int:
        """Return the estimate for an unfiltered PostgreSQL table, else the exact count."""
        query = self.object_list.query
        if connection.vendor == "postgresql" and not query.where:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass",
                    [query.model._meta.db_table],
                )
                estimate = cursor.fetchone()[0]
            if estimate >= 0:  # -1: never analysed.
                return estimate
        return super().count


class AgentTypeFilter(admin.SimpleListFilter):
    """Filter by agent type, offering the registered types rather than scanning the table."""

    title = "agent type"
    parameter_name = "agent_type"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        """Return the registered agent types."""
        return [(name, name) for name in sorted(get_registry().registered_types())]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        """Keep the sessions of the chosen type."""
        return queryset.filter(agent_type=self.value()) if self.value() else queryset


class HasParentFilter(admin.SimpleListFilter):
    """Filter sub-agent sessions (with a parent) from top-level ones."""

    title = "has parent"
    parameter_name = "has_parent"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        """Offer yes and no."""
        return [("yes", "Yes"), ("no", "No")]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        """Keep sessions with a parent, or without one."""
        if self.value() == "yes":
            return queryset.exclude(parent_session_id="")
        if self.value() == "no":
            return queryset.filter(parent_session_id="")
        return queryset


@admin.register(AgentSession)
class AgentSessionAdmin(StorableInputsAdmin):
    list_display = (
        "id",
        "agent_type",
        "owner",
        "status",
        "step_count",
        "message_count",
        "updated_at",
        "expires_at",
    )
    list_filter = (
        "status",
        AgentTypeFilter,
        ("created_at", admin.DateFieldListFilter),
        ("updated_at", admin.DateFieldListFilter),
        ("expires_at", admin.DateFieldListFilter),
        HasParentFilter,
    )
    search_fields = ("=id", "=user_id", "tags__icontains", "metadata__icontains")
    search_help_text = "An exact session id or user id, or text in the tags or metadata."
    list_select_related = ("owner",)
    ordering = ("-updated_at",)
    show_full_result_count = False
    paginator = EstimatedCountPaginator
    list_per_page = 50
    actions = ("reap_expired_now", "mark_failed", "interrupt", "delete_sessions")
    change_form_template = "admin/agents_app/agentsession/change_form.html"

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        """Defer the large fields on the list, which shows none of them."""
        sessions = super().get_queryset(request)
        if request.resolver_match and request.resolver_match.url_name.endswith("_changelist"):
            return sessions.defer(*DEFERRED_FIELDS)
        return sessions

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        """Show every field read-only: sessions change through the runtime, not forms."""
        return [field.name for field in self.model._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        """Refuse adding: sessions are created through the API."""
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Allow the list's actions to whoever may change sessions; the detail page is read-only."""
        return obj is None and super().has_change_permission(request)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Delete through the action only, which takes the session's stream with it."""
        return obj is None and super().has_delete_permission(request)

    def get_actions(
        self, request: HttpRequest, action_location: ActionLocation = ActionLocation.CHANGE_LIST
    ) -> dict[str, Any]:
        """Drop Django's delete action: it leaves the streams behind."""
        actions = super().get_actions(request, action_location=action_location)
        actions.pop("delete_selected", None)
        return actions

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: AgentSession | None = None,
    ) -> HttpResponse:
        """Add the records of the session `get_object` found below its fields."""
        if obj is not None:
            context.update(session_records(obj, request.GET))
        return super().render_change_form(request, context, add, change, form_url, obj)

    @admin.action(
        description="Reap the selected sessions that have expired", permissions=["change"]
    )
    def reap_expired_now(self, request: HttpRequest, queryset: QuerySet) -> None:
        """Fail the selected sessions past their expiry, as the cleanup command would."""
        selected = list(queryset.values_list("pk", flat=True))
        report = reap_expired_sessions(session_ids=selected)
        self.report(request, "Reaped", report.reaped, selected, "have not expired or are busy")

    @admin.action(description="Mark the selected sessions failed…", permissions=["change"])
    def mark_failed(self, request: HttpRequest, queryset: QuerySet) -> HttpResponse | None:
        """Ask for a reason, then fail the selected unfinished sessions with it."""
        selected = list(queryset.values_list("pk", flat=True))
        reason = request.POST.get("reason", "").strip()
        if "apply" in request.POST and reason:
            failed = sessions_mark_failed(session_ids=selected, reason=reason)
            self.report(request, "Marked failed", failed, selected, "had already ended")
            return None
        return self.confirmation(
            request,
            queryset,
            "admin/agents_app/agentsession/mark_failed.html",
            "mark_failed",
            missing_reason="apply" in request.POST,
        )

    @admin.action(description="Interrupt the selected running sessions", permissions=["change"])
    def interrupt(self, request: HttpRequest, queryset: QuerySet) -> None:
        """Raise the interrupt flag of the selected sessions that are running."""
        selected = list(queryset.values_list("pk", flat=True))
        interrupted = sessions_interrupt(session_ids=selected, reason="Interrupted by an operator")
        self.report(request, "Interrupted", interrupted, selected, "were not running")

    @admin.action(
        description="Delete the selected sessions and their streams…", permissions=["delete"]
    )
    def delete_sessions(self, request: HttpRequest, queryset: QuerySet) -> HttpResponse | None:
        """List what would go, then delete the selected sessions with their streams."""
        if "apply" in request.POST:
            selected = list(queryset.values_list("pk", flat=True))
            deleted = sessions_delete(session_ids=selected)
            self.report(request, "Deleted", deleted, selected, "were already gone")
            return None
        return self.confirmation(
            request,
            queryset,
            "admin/agents_app/agentsession/delete_sessions.html",
            "delete_sessions",
        )

    def confirmation(
        self,
        request: HttpRequest,
        queryset: QuerySet,
        template: str,
        action: str,
        **context: Any,
    ) -> TemplateResponse:
        """Render an action's confirmation page for the selected sessions."""
        return TemplateResponse(
            request,
            template,
            {
                **self.admin_site.each_context(request),
                "opts": self.model._meta,
                "title": "Are you sure?",
                "sessions": queryset.select_related(None).only(
                    "id", "agent_type", "status", "message_count"
                ),
                "action": action,
                "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
                **context,
            },
        )

    def report(
        self, request: HttpRequest, done: str, acted: list[str], selected: list[str], why: str
    ) -> None:
        """Tell the user how many sessions the action changed and how many it skipped."""
        skipped = len(selected) - len(acted)
        message = f"{done} {len(acted)} of {len(selected)} selected sessions."
        if skipped:
            message += f" The other {skipped} {why}."
        self.message_user(request, message, messages.SUCCESS if acted else messages.WARNING)


def session_records(session: AgentSession, query: Any) -> dict[str, Any]:
    """Return what the detail page shows below a session's fields."""
    session_id = session.pk
    return {
        "message_tree": message_tree(session_id, session.message_count),
        "runs": Run.objects.filter(session_id=session_id).order_by("turn"),
        "timelines": step_timelines(session_id),
        "checkpoints": Checkpoint.objects.filter(session_id=session_id)
        .defer("state")
        .order_by("-created_at")[:CHECKPOINTS_SHOWN],
        "sub_sessions": [
            (ref, reverse("admin:sessions_app_agentsession_change", args=[ref.sub_session_id]))
            for ref in SubSessionRef.objects.filter(session_id=session_id).order_by("started_at")
        ],
        "usage": get_usage_store().get_rollup(session_id).to_wire(),
        "chunks": chunk_page(session.stream_id, query.get("chunks_after", "0")),
    }


def step_timelines(session_id: str) -> list[dict[str, Any]]:
    """Return the latest runs' steps as timelines: when each began, its model call, its tools
    and its commit, with each part's share of the step for the bars."""
    rows = (
        Checkpoint.objects.filter(session_id=session_id, timings__isnull=False)
        .order_by("-created_at")
        .values("run_id", "step_count", "timings", "created_at")[:CHECKPOINTS_SHOWN]
    )
    runs: dict[str, list[dict[str, Any]]] = {}
    for row in sorted(rows, key=lambda row: row["step_count"]):
        timings = row["timings"]
        started = datetime.fromisoformat(timings["startedAt"])
        total = max((row["created_at"] - started) / timedelta(milliseconds=1), 1)
        model, tools = timings.get("modelMs") or 0, timings.get("toolsMs") or 0
        runs.setdefault(row["run_id"], []).append(
            {
                "step": row["step_count"],
                "started": started,
                "committed": row["created_at"],
                "total_ms": round(total),
                "model_ms": model,
                "tools_ms": tools,
                "tools": timings.get("tools", []),
                # Percentages of the step: model, tools, and the rest up to the commit.
                "model_share": round(100 * min(model, total) / total),
                "tools_share": round(100 * min(tools, total - min(model, total)) / total),
            }
        )
    return [{"run_id": run_id, "steps": steps} for run_id, steps in runs.items()]


def message_tree(session_id: str, total: int) -> dict[str, Any]:
    """Return the session's first messages in tree order, with depth and branch markers."""
    rows = list(
        Message.objects.filter(session_id=session_id)
        .order_by("sequence")
        .values("id", "parent_id", "sequence", "role", "content", "tool_call_id")[:MESSAGES_SHOWN]
    )
    children: dict[str | None, list[dict[str, Any]]] = {}
    for row in rows:
        children.setdefault(row["parent_id"], []).append(row)
    shown = {row["id"] for row in rows}
    roots = [row for row in rows if row["parent_id"] not in shown]
    leaf = get_session_store().get_latest_leaf(session_id)
    ordered: list[dict[str, Any]] = []
    stack = [(root, 0) for root in reversed(roots)]
    while stack:  # Depth first, without recursion: a conversation is a chain thousands deep.
        row, depth = stack.pop()
        branches = children.get(row["id"], [])
        ordered.append(
            {
                **row,
                "indent": depth,
                "branches": len(branches) if len(branches) > 1 else 0,
                "active_leaf": leaf is not None and row["id"] == leaf.id,
            }
        )
        depth += 1 if len(branches) > 1 else 0
        stack.extend((child, depth) for child in reversed(branches))
    return {"messages": ordered, "total": total, "limit": MESSAGES_SHOWN}


def chunk_page(stream_id: str, after: str) -> dict[str, Any]:
    """Return a page of the stream's chunks after sequence `after`, and where the next starts."""
    start = int(after) if after.isdigit() else 0
    page = list(
        StreamChunk.objects.filter(stream_id=stream_id, sequence__gt=start)
        .order_by("sequence")
        .values("sequence", "step", "type", "chunk", "created_at")[: CHUNKS_PER_PAGE + 1]
    )
    more = len(page) > CHUNKS_PER_PAGE
    page = page[:CHUNKS_PER_PAGE]
    total = Stream.objects.filter(pk=stream_id).values_list("chunk_count", flat=True).first()
    return {
        "items": page,
        "after": start,
        "next": page[-1]["sequence"] if more else None,
        "total": total or 0,
    }
