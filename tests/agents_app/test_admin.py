"""Django admin for sessions: every page loads for staff over a large table without per-row
queries, the detail page shows what is recorded under a session, each action does what it says,
and people without the right are refused."""

import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents_app.runs import services
from agents_app.runtime import executor
from sessions_app.models import AgentSession
from sessions_app.stores import get_session_store
from sessions_app.stores.types import (
    NEW_ROOT,
    Message,
    MessageRole,
    RunStatus,
    SessionStatus,
    SubSessionRef,
)
from sessions_app.usage import get_usage_store
from sessions_app.usage.types import TokenCounts, TokensEntry
from streams_app.backends import get_stream_manager
from streams_app.chunks import TextDelta
from tests.agents_app import agents  # noqa: F401 (registers `steady`)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("private_queue")]

LIST = "/admin/sessions_app/agentsession/"
# Bounds as the date filters' own links give them: aware, "+" escaped.
SOON = (timezone.now() + timedelta(hours=12)).isoformat().replace("+", "%2B")
LONG_AGO = "2000-01-01T00:00:00%2B00:00"
ROWS = 3_000


@pytest.fixture
def staff(django_user_model) -> Client:
    user = django_user_model.objects.create_user("operator", password="pw", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(
            codename__in=["view_agentsession", "change_agentsession", "delete_agentsession"]
        )
    )
    client = Client()
    client.force_login(user)
    return client


def many_sessions(count: int, owner=None) -> None:
    now = timezone.now()
    AgentSession.objects.bulk_create(
        AgentSession(
            id=f"bulk-{n:05}",
            agent_type="counter" if n % 2 else "researcher",
            stream_id=f"bulk-stream-{n:05}",
            owner=owner,
            user_id=f"user-{n % 7}",
            tags=["bulk", f"t{n % 3}"],
            metadata={"tenant": f"acme-{n % 5}"},
            parent_session_id="bulk-00000" if n % 10 == 1 else "",
            expires_at=now + timedelta(days=n % 3 - 1),
            custom_state={"blob": "x" * 1000},
        )
        for n in range(count)
    )


def rich_session(owner) -> str:
    """A session with a branching conversation, runs, checkpoints, a child, usage and chunks."""
    store = get_session_store()
    state = store.create_session("rich", agent_type="counter", owner_id=owner.id)
    store.create_session("child", agent_type="researcher", parent_session_id="rich")
    [question] = store.append_messages("rich", [Message(role=MessageRole.USER, content="Q?")])
    store.append_messages("rich", [Message(role=MessageRole.ASSISTANT, content="First answer")])
    store.append_messages(
        "rich",
        [Message(role=MessageRole.ASSISTANT, content="Second answer", parent_id=question.id)],
    )
    store.append_messages(
        "rich", [Message(role=MessageRole.USER, content="Other root", parent_id=NEW_ROOT)]
    )
    store.create_run("rich", "run-1")
    store.update_run_status("run-1", RunStatus.COMPLETED)
    store.add_sub_session_refs(
        "rich",
        [
            SubSessionRef(
                sub_session_id="child", agent_type="researcher", parent_tool_call_id="call-1"
            )
        ],
    )
    store.set_interrupt_flag("rich", "operator asked")
    get_usage_store().record_entry(
        TokensEntry(session_id="rich", model="m-1", tokens=TokenCounts(prompt=11, completion=4))
    )
    writer = get_stream_manager().create_writer(state.stream_id, "run-1", "counter")
    writer.write_many(
        [
            TextDelta(step=1, session_id="rich", agent_type="counter", delta=f"d{n}")
            for n in range(1, 151)
        ]
    )
    return "rich"


def test_the_list_makes_the_same_queries_for_ten_rows_as_for_thousands(staff, owner):
    many_sessions(10, owner)
    with CaptureQueriesContext(connection) as few:
        assert staff.get(LIST).status_code == 200
    AgentSession.objects.all().delete()
    many_sessions(ROWS, owner)

    with CaptureQueriesContext(connection) as many:
        page = staff.get(LIST)

    assert page.status_code == 200
    assert len(many) == len(few)
    listed = [q["sql"] for q in many if "sessions_app_agentsession" in q["sql"]]
    assert not any('"custom_state"' in sql for sql in listed)  # Large fields are deferred.
    assert b"bulk-02999" in page.content
    assert b"owner" in page.content


@pytest.mark.parametrize(
    ("query", "present", "absent"),
    [
        ("status__exact=active", "bulk-00001", None),
        ("agent_type=counter", "bulk-00001", "bulk-00002"),
        ("agent_type=researcher", "bulk-00002", "bulk-00001"),
        ("has_parent=yes", "bulk-00011", "bulk-00002"),
        ("has_parent=no", "bulk-00002", "bulk-00011"),
        # An id without the time, which differs between xdist workers' collections.
        pytest.param(f"expires_at__gte={SOON}", "bulk-00002", "bulk-00003", id="expires-soon"),
        (f"created_at__gte={LONG_AGO}", "bulk-00002", None),
        (f"updated_at__lt={LONG_AGO}", None, "bulk-00002"),
        ("q=bulk-00042", "bulk-00042", "bulk-00041"),
        ("q=user-3", "bulk-00003", "bulk-00004"),
        ("q=acme-4", "bulk-00004", "bulk-00003"),
        ("q=t2", "bulk-00002", "bulk-00003"),
    ],
)
def test_every_filter_and_search_narrows_the_list(staff, query, present, absent):
    many_sessions(45)  # One page.

    page = staff.get(f"{LIST}?{query}")

    assert page.status_code == 200
    if present:
        assert present.encode() in page.content
    if absent:
        assert absent.encode() not in page.content


def test_the_detail_page_shows_the_tree_runs_children_flag_usage_and_chunk_pages(staff, owner):
    rich_session(owner)

    page = staff.get(f"{LIST}rich/change/")
    text = page.content.decode()

    assert page.status_code == 200
    assert "branch point: 2 branches" in text
    assert "active leaf" in text
    for content in ("First answer", "Second answer", "Other root"):
        assert content in text
    assert "run-1" in text
    assert "completed" in text
    assert 'href="/admin/sessions_app/agentsession/child/change/"' in text
    assert "operator asked" in text
    assert "m-1" in text
    assert "d100" in text
    assert "d101" not in text
    assert "?chunks_after=100" in text
    assert 'name="_save"' not in text  # Read-only.

    second = staff.get(f"{LIST}rich/change/?chunks_after=100").content.decode()
    assert "d101" in second
    assert "d150" in second
    assert ">d100<" not in second


def test_the_detail_page_shows_each_steps_timeline(staff, owner):
    started = services.agent_start(user=owner, agent_type="steady", message="Go.")
    outcome = executor.run_steps(started.session_id, started.run_id, 1, time_slice=60)
    assert outcome.next_step is None  # All three steps, one after another.

    page = staff.get(f"{LIST}{started.session_id}/change/").content.decode()
    timeline = page.split("Step timelines")[1].split("Checkpoints (latest first)")[0]
    rows = timeline.split("<tr><td>")[1:]

    assert f"Run {started.run_id}" in timeline
    assert [row.split("</td>")[0] for row in rows] == ["1", "2", "3"]
    tools = [re.findall(r"(\w+) \d+ ms", row.split("<td>")[3]) for row in rows]
    assert tools == [["note", "note"], ["note"], []]
    assert all(re.search(r'title="model \d+ ms"', row) for row in rows)


def test_the_detail_page_refuses_edits(staff, owner):
    rich_session(owner)

    answer = staff.post(f"{LIST}rich/change/", {"agent_type": "other"})

    assert answer.status_code == 403
    assert get_session_store().load_state("rich").agent_type == "counter"


def act(client: Client, action: str, ids: list[str], **extra: str):
    return client.post(LIST, {"action": action, "_selected_action": ids, **extra}, follow=True)


def test_reap_fails_only_the_selected_sessions_that_expired(staff):
    store = get_session_store()
    store.create_session("old", agent_type="counter", expires_at=timezone.now() - timedelta(1))
    store.create_session("new", agent_type="counter", expires_at=timezone.now() + timedelta(1))
    store.create_session(
        "old-unselected", agent_type="counter", expires_at=timezone.now() - timedelta(1)
    )

    page = act(staff, "reap_expired_now", ["old", "new"])

    assert "Reaped 1 of 2 selected sessions" in page.content.decode()
    assert store.load_state("old").status == SessionStatus.FAILED
    assert store.load_state("new").status == SessionStatus.ACTIVE
    assert store.load_state("old-unselected").status == SessionStatus.ACTIVE


def test_mark_failed_asks_for_a_reason_then_records_it(staff):
    store = get_session_store()
    state = store.create_session("s", agent_type="counter")
    get_stream_manager().create_writer(state.stream_id, "run", "counter")

    asked = act(staff, "mark_failed", ["s"])
    assert 'name="reason"' in asked.content.decode()
    assert store.load_state("s").status == SessionStatus.ACTIVE

    act(staff, "mark_failed", ["s"], apply="yes", reason="Stuck since Tuesday")

    state = store.load_state("s")
    assert state.status == SessionStatus.FAILED
    assert (state.abort_reason, state.failure_reason) == ("Stuck since Tuesday", "operator")
    assert get_stream_manager().get_stream_info(state.stream_id).status == "failed"


def test_interrupt_raises_the_flag_of_running_sessions_only(staff, owner):
    started = services.agent_start(user=owner, agent_type="counter", message="add 1")
    get_session_store().create_session("idle", agent_type="counter")

    page = act(staff, "interrupt", [started.session_id, "idle"])

    assert "Interrupted 1 of 2 selected sessions" in page.content.decode()
    assert get_session_store().check_interrupt_flag(started.session_id) is not None
    assert get_session_store().check_interrupt_flag("idle") is None


def test_delete_confirms_then_removes_sessions_and_their_streams(staff, owner):
    rich_session(owner)
    stream_id = get_session_store().load_state("rich").stream_id

    confirm = act(staff, "delete_sessions", ["rich"])
    assert "Yes, delete them" in confirm.content.decode()
    assert get_session_store().load_state("rich") is not None

    act(staff, "delete_sessions", ["rich"], apply="yes")

    assert get_session_store().load_state("rich") is None
    assert get_stream_manager().get_stream_info(stream_id) is None
    assert get_session_store().load_state("child") is not None  # Its own session.


def test_django_delete_action_and_single_delete_are_not_offered(staff, owner):
    rich_session(owner)

    assert b"delete_selected" not in staff.get(LIST).content
    assert staff.get(f"{LIST}rich/delete/").status_code == 403


def test_people_without_the_right_are_refused(client, owner, django_user_model):
    rich_session(owner)
    client.force_login(owner)  # Not staff.
    assert client.get(LIST).status_code == 302
    assert client.get(f"{LIST}rich/change/").status_code == 302

    viewer = django_user_model.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.set(Permission.objects.filter(codename="view_agentsession"))
    client.force_login(viewer)
    assert client.get(f"{LIST}rich/change/").status_code == 200
    assert b"reap_expired_now" not in client.get(LIST).content
    client.post(LIST, {"action": "delete_sessions", "_selected_action": ["rich"], "apply": "yes"})
    assert get_session_store().load_state("rich") is not None


@pytest.mark.parametrize("page", ["change", "history", "delete"])
def test_an_id_holding_a_nul_is_a_session_not_found(staff, owner, page):
    """It was a server error on PostgreSQL, which refuses a NUL in a text."""
    rich_session(owner)

    response = staff.get(f"{LIST}rich%00/{page}/", follow=True)

    assert response.redirect_chain == [("/admin/", 302)]
    assert "exist. Perhaps it was deleted?" in next(str(m) for m in response.context["messages"])
    assert get_session_store().load_state("rich") is not None


@pytest.mark.parametrize(
    "query", ["status=running%00", "agent_type=counter%00", "user_id=u%00", "id=rich%00", "q=%00"]
)
def test_a_filter_holding_a_nul_is_refused_as_a_filter_it_cannot_apply(staff, owner, query):
    """Each was a server error on PostgreSQL, or a list filtered by it on SQLite."""
    rich_session(owner)

    response = staff.get(f"{LIST}?{query}", follow=True)

    assert response.redirect_chain == [(f"{LIST}?e=1", 302)]
    assert response.status_code == 200
    assert b"rich" in response.content  # The list, unfiltered.


def test_the_mcp_servers_admin_refuses_a_nul_alike(admin_client, owner):
    rich_session(owner)
    servers = "/admin/agents_app/sessionmcpserver/"

    for query in ("name=tools%00", "session=rich%00"):
        response = admin_client.get(f"{servers}?{query}")
        assert (response.status_code, response.url) == (302, f"{servers}?e=1")
