"""Sub-agents: children on their own Celery steps, their chunks in the parent's stream.

Everything runs on real Celery workers.
"""

import json

import pytest

from agents_app.runs import services
from agents_app.subagents.children import child_session_id
from agents_app.subagents.companions import persistent_child_id
from sessions_app.stores import get_session_store
from sessions_app.stores.types import RunStatus, SessionStatus, SubSessionMode
from sessions_app.usage import get_usage_store
from streams_app.backends import get_stream_manager
from tests.agents_app.runs import finished, text_of
from tests.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def start(owner, agent_type: str) -> services.StartedRun:
    return services.agent_start(user=owner, agent_type=agent_type, session_id="p", message="Go.")


def chunks_of(stream_id: str) -> list[dict]:
    return [c.chunk for c in get_stream_manager().get_all_chunks(stream_id)]


def assert_nested_once(chunks: list[dict], child_id: str, child_chunks: list[dict]) -> None:
    """Assert the child's chunks appear once, in order, between its start and end chunks."""
    starts = [i for i, c in enumerate(chunks) if c.get("subSessionId") == child_id]
    assert [chunks[i]["type"] for i in starts] == ["subagent_start", "subagent_end"]
    inside = [c for c in chunks[starts[0] + 1 : starts[1]] if c["sessionId"] == child_id]
    assert inside == [c for c in child_chunks if c["sessionId"] == child_id]
    everywhere = [c for c in chunks if c["sessionId"] == child_id]
    assert everywhere == inside


def test_parallel_children_two_levels_deep_complete_the_parent(worker, owner):
    start(owner, "director")

    state = finished("p")

    store = get_session_store()
    orchestrator = child_session_id("p", "call-o")
    analysts = [child_session_id(orchestrator, call) for call in ("call-a", "call-b")]
    assert state.status == SessionStatus.COMPLETED
    assert state.output == ('Results: Results: Analysed {"topic": "a"} | Analysed {"topic": "b"}')
    refs = store.get_sub_session_refs("p")
    assert [(r.sub_session_id, r.agent_type, r.mode, r.status) for r in refs] == [
        (orchestrator, "orchestrator", SubSessionMode.EPHEMERAL, SessionStatus.COMPLETED)
    ]
    assert refs[0].started_at is not None
    assert refs[0].completed_at >= refs[0].started_at
    assert [r.sub_session_id for r in store.get_sub_session_refs(orchestrator)] == analysts
    for analyst in analysts:
        child = store.load_state(analyst)
        assert (child.parent_session_id, child.root_session_id) == (orchestrator, "p")
    # The director's stream holds the orchestrator's chunks, which hold the analysts'.
    parent_chunks = chunks_of("p")
    assert_nested_once(parent_chunks, orchestrator, chunks_of(orchestrator))
    for analyst in analysts:
        assert_nested_once(chunks_of(orchestrator), analyst, chunks_of(analyst))
        assert sum(c["sessionId"] == analyst for c in parent_chunks) == len(chunks_of(analyst))
    types = [c["type"] for c in parent_chunks if c["sessionId"] == "p"]
    assert types.count("run_suspended") == types.count("run_resumed") == 1
    assert [r.status for r in store.list_runs("p")] == [RunStatus.COMPLETED]
    usage = get_usage_store()
    rollup = usage.get_rollup("p")
    own = [usage.get_rollup(s).tokens.total for s in ("p", orchestrator, *analysts)]
    assert all(own)
    assert rollup.tokens_including_sub_agents.total == sum(own)
    assert (rollup.sub_agent_stats.total_calls, rollup.sub_agent_stats.successful_calls) == (1, 1)
    run_id = store.get_current_run("p").run_id
    assert usage.get_rollup("p", run_id=run_id).tokens_including_sub_agents.total == sum(own)


def test_a_failing_child_and_a_timed_out_one_fail_their_calls_not_the_parent(worker, owner):
    start(owner, "delegator")

    state = finished("p")

    store = get_session_store()
    refuser, talker = (child_session_id("p", call) for call in ("call-r", "call-t"))
    assert state.status == SessionStatus.COMPLETED
    results = [m for m in store.get_messages("p").messages if m.role == "tool"]
    assert [m.tool_call_id for m in results] == ["call-r", "call-t"]
    assert '"failureReason": "llm_error"' in results[0].content
    assert '"failureReason": "timeout"' in results[1].content
    assert store.load_state(refuser).status == SessionStatus.FAILED
    timed_out = store.load_state(talker)
    assert (timed_out.status, timed_out.failure_reason) == (SessionStatus.FAILED, "timeout")
    stats = get_usage_store().get_rollup("p").sub_agent_stats
    assert (stats.total_calls, stats.failed_calls) == (2, 2)


def test_interrupting_the_parent_interrupts_its_children(worker, owner):
    start(owner, "patient")
    child = child_session_id("p", "call-t")
    wait_for(lambda: get_session_store().session_exists(child) and text_of(child))

    services.agent_interrupt(user=owner, session_id="p", reason="enough")
    state = finished("p")

    assert state.status == SessionStatus.INTERRUPTED
    assert get_session_store().load_state(child).status == SessionStatus.INTERRUPTED
    result = [m for m in get_session_store().get_messages("p").messages if m.role == "tool"]
    assert "interrupted" in result[0].content


def test_aborting_the_parent_aborts_its_children(worker, owner):
    start(owner, "patient")
    child = child_session_id("p", "call-t")
    wait_for(lambda: get_session_store().session_exists(child) and text_of(child))

    services.agent_abort(user=owner, session_id="p", reason="stop")

    child_state = wait_for(
        lambda: (s := get_session_store().load_state(child)).status == SessionStatus.FAILED and s
    )
    assert child_state.aborted
    assert get_session_store().load_state("p").status == SessionStatus.FAILED
    wait_for(
        lambda: get_session_store().get_sub_session_refs("p")[0].status == SessionStatus.FAILED,
        what="the parent to record its child's end",
    )


# Persistent children and the companion tools


def tool_results(session_id: str) -> dict[str, dict]:
    messages = get_session_store().get_messages(session_id, limit=100).messages
    return {  # A text result is stored as it is; others as JSON.
        m.tool_call_id: json.loads(m.content) if m.content[:1] in "{[" else m.content
        for m in messages
        if m.role == "tool"
    }


def test_a_persistent_child_consulted_twice_remembers_the_first_exchange(worker, owner):
    start(owner, "author")

    state = finished("p")

    results = tool_results("p")
    child_id = persistent_child_id("p", "c")
    assert state.status == SessionStatus.COMPLETED
    assert results["s1"] == "On draft 1 (heard 0 before)"
    assert results["s2"] == "On draft 2 (heard 1 before)"  # The same session, its memory kept.
    assert results["l1"] == {
        "children": [
            {"name": "c", "agentType": "critic", "sessionId": child_id, "status": "completed"}
        ]
    }
    assert results["g1"]["output"] == "On draft 2 (heard 1 before)"
    assert "not an agent type you may spawn" in results["s3"]["error"]
    child_runs = get_session_store().list_runs(child_id)
    assert [r.status for r in child_runs] == [RunStatus.COMPLETED, RunStatus.COMPLETED]
    refs = get_session_store().get_sub_session_refs("p")
    assert [(r.mode, r.name, r.status) for r in refs] == [
        (SubSessionMode.PERSISTENT, "c", SessionStatus.COMPLETED)
    ]
    # Each consultation's chunks sit once in the parent's stream, between its own markers.
    parent_chunks = chunks_of("p")
    markers = [c["type"] for c in parent_chunks if c.get("subSessionId") == child_id]
    assert markers == ["subagent_start", "subagent_end"] * 2
    child_deltas = [c["delta"] for c in chunks_of(child_id) if c["type"] == "text_delta"]
    copied = [
        c["delta"]
        for c in parent_chunks
        if c["sessionId"] == child_id and c["type"] == "text_delta"
    ]
    assert copied == child_deltas


def test_children_left_running_are_waited_for_and_terminated(worker, owner):
    start(owner, "manager")

    state = finished("p")

    results = tool_results("p")
    assert state.status == SessionStatus.COMPLETED
    assert results["s1"] == {
        "name": "bg",
        "sessionId": persistent_child_id("p", "bg"),
        "status": "running",
    }
    assert results["s2"]["status"] == "running"
    assert results["w1"] == "On task (heard 0 before)"
    bg = persistent_child_id("p", "bg")  # Still running when waited for: its chunks came in.
    assert [c["type"] for c in chunks_of("p") if c.get("subSessionId") == bg] == [
        "subagent_start",
        "subagent_end",
    ]
    assert results["t1"] == {"name": "chatty", "terminated": True}
    assert "No child named 'nobody'" in results["m1"]["error"]
    chatty = get_session_store().load_state(persistent_child_id("p", "chatty"))
    assert (chatty.status, chatty.aborted) == (SessionStatus.FAILED, True)
