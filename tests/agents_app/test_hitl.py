"""Client and approval tools: the run suspends, people submit, the run continues by itself.

Everything goes through the REST API with real Celery workers.
"""

import json

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient
from rest_framework.test import APIClient

from agents_app.operations.reaping import EXPIRED_FAILURE_REASON, reap_expired_sessions
from sessions_app.stores import get_session_store
from sessions_app.stores.types import MessageRole, RunStatus, SessionStatus
from streams_app.backends import get_stream_manager
from tests.agents_app.chat_requests import post_chat
from tests.agents_app.runs import chunk_types, finished
from tests.agents_app.worker import Worker
from tests.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)
SUSPENDED = {SessionStatus.SUSPENDED_CLIENT_TOOL, SessionStatus.SUSPENDED_STEP_PARTIAL}


def client_of(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def start(client: APIClient, agent_type: str, session_id: str = "s-1") -> dict:
    response = client.post(
        f"/api/sessions/{session_id}/start",
        {"agentType": agent_type, "input": {"message": "Go."}},
        format="json",
    )
    assert response.status_code == 202, response.content
    return response.json()


def suspended(session_id: str = "s-1"):
    """Wait until the session's run has suspended; return its state."""
    return wait_for(
        lambda: (state := get_session_store().load_state(session_id)).status in SUSPENDED and state,
        what=f"session {session_id} to suspend",
    )


def submit(client: APIClient, body: dict, session_id: str = "s-1"):
    return client.post(f"/api/chat/{session_id}/submit-tool-result", body, format="json")


def test_a_run_suspends_on_held_calls_and_continues_once_all_are_answered(worker, owner):
    client = client_of(owner)
    started = start(client, "asker")

    state = suspended()
    run = get_session_store().get_current_run("s-1")
    status = client.get("/api/sessions/s-1/status").json()
    assert state.status == SessionStatus.SUSPENDED_STEP_PARTIAL  # The note ran already.
    assert (run.run_id, run.status, run.completed_at) == (
        started["runId"],
        RunStatus.SUSPENDED,
        None,
    )
    assert (status["status"], status["isExecuting"]) == ("suspended_step_partial", False)
    assert {
        call_id: entry["kind"] for call_id, entry in state.pending_client_tool_calls.items()
    } == {
        "call-ask": "client",
        "call-transfer": "approval",
    }
    assert state.suspended_step_id == f"{run.run_id}:1"
    assert chunk_types("s-1")[-7:] == [
        "tool_call_start",
        "custom",  # The note tool's.
        "tool_result",
        "tool_call_start",
        "tool_call_start",
        "tool_approval_request",
        "run_suspended",
    ]

    first = submit(client, {"toolCallId": "call-ask", "result": {"colour": "green"}})
    repeated = submit(client, {"toolCallId": "call-ask", "result": {"colour": "red"}})

    assert first.status_code == repeated.status_code == 202
    assert repeated.json() == first.json()
    assert get_session_store().load_state("s-1").status == SessionStatus.SUSPENDED_STEP_PARTIAL

    assert submit(client, {"toolCallId": "call-transfer", "approved": True}).status_code == 202
    state = finished("s-1")

    assert state.status == SessionStatus.COMPLETED
    assert state.output == 'Results: {"noted": "before"} | {"colour": "green"} | {"sent": 5}'
    assert state.custom_state == {"notes": ["before"], "transfers": [5]}
    assert state.pending_client_tool_calls == {}
    assert set(state.completed_client_tool_calls) == {"call-ask", "call-transfer"}
    messages = get_session_store().get_messages("s-1").messages
    assert [(m.role, m.tool_call_id) for m in messages] == [
        (MessageRole.USER, None),
        (MessageRole.ASSISTANT, None),
        (MessageRole.TOOL, "call-note"),
        (MessageRole.TOOL, "call-ask"),
        (MessageRole.TOOL, "call-transfer"),
        (MessageRole.ASSISTANT, None),
    ]
    assert [(r.run_id, r.status) for r in get_session_store().list_runs("s-1")] == [
        (started["runId"], RunStatus.COMPLETED)
    ]
    types = chunk_types("s-1")
    assert types.count("run_suspended") == types.count("run_resumed") == 1
    assert types.count("tool_approval_response") == 1
    assert types[-1] == "run_completed"


def test_a_rejected_call_becomes_a_result_saying_so(worker, owner):
    client = client_of(owner)
    start(client, "approver")
    assert suspended().status == SessionStatus.SUSPENDED_CLIENT_TOOL  # Nothing ran yet.

    answer = submit(
        client, {"toolCallId": "call-transfer", "approved": False, "reason": "Too much"}
    )
    state = finished("s-1")

    assert answer.status_code == 202
    assert state.output == 'Results: {"error": "The user rejected this tool call: Too much"}'
    assert state.custom_state == {}  # The transfer never ran.
    decisions = [
        c.chunk
        for c in get_stream_manager().get_all_chunks("s-1")
        if c.chunk["type"] == "tool_approval_response"
    ]
    assert [(d["decision"], d["reason"]) for d in decisions] == [("reject", "Too much")]


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ({"toolCallId": "call-nope", "approved": True}, "unknown-tool-call"),
        ({"toolCallId": "call-transfer"}, "invalid-input"),
        ({"toolCallId": "call-transfer", "approved": "yes"}, "invalid-input"),
        ({"approved": True}, "invalid-input"),
    ],
)
def test_bad_submissions_are_refused_and_change_nothing(worker, owner, body, problem):
    client = client_of(owner)
    start(client, "approver")
    before = suspended()

    answer = submit(client, body)

    assert answer.status_code == (409 if problem == "unknown-tool-call" else 400)
    assert answer.json()["error"]["code"] == problem
    after = get_session_store().load_state("s-1")
    assert (after.version, after.status) == (before.version, before.status)


def test_a_submission_for_a_session_that_waits_for_nothing_is_an_unknown_call(owner):
    client = client_of(owner)
    get_session_store().create_session("s-1", agent_type="approver", owner_id=owner.pk)

    answer = submit(client, {"toolCallId": "call-transfer", "approved": True})

    assert answer.status_code == 409
    assert answer.json()["error"]["code"] == "unknown-tool-call"


def test_another_users_submission_answers_404(worker, owner, stranger):
    start(client_of(owner), "approver")
    suspended()

    answer = submit(client_of(stranger), {"toolCallId": "call-transfer", "approved": True})

    assert answer.status_code == 404
    assert get_session_store().load_state("s-1").status == SessionStatus.SUSPENDED_CLIENT_TOOL


def test_the_chat_stream_re_attaches_to_the_continuation(worker, owner):
    client = client_of(owner)
    start(client, "slow-approver")
    suspended()
    assert client.get("/api/chat/s-1/stream").status_code == 204  # Nothing runs meanwhile.

    submitted = submit(client, {"toolCallId": "call-transfer", "approved": True})
    assert submitted.status_code == 202, submitted.content
    parts = _reattach(owner)

    types = [p["type"] for p in parts if isinstance(p, dict)]
    assert types[0] == "start"
    assert "tool-approval-request" not in types  # The continuation only.
    assert {"type": "tool-output-available", "toolCallId": "call-transfer"}.items() <= next(
        p for p in parts if isinstance(p, dict) and p["type"] == "tool-output-available"
    ).items()
    assert parts[-2:] == [{"type": "finish", "finishReason": "stop"}, "[DONE]"]


def _reattach(user) -> list:
    async def scenario():
        client = AsyncClient()
        await client.aforce_login(user)
        response = await client.get("/api/chat/s-1/stream")
        assert response.status_code == 200
        text = ""
        async for part in response.streaming_content:
            text += part.decode()
        lines = [line[len("data: ") :] for line in text.split("\n") if line.startswith("data: ")]
        return [line if line == "[DONE]" else json.loads(line) for line in lines]

    return async_to_sync(scenario)()


def test_a_suspended_run_survives_its_workers_restart(owner, tmp_path):
    client = client_of(owner)
    own_worker = Worker(tmp_path).start()
    try:
        start(client, "approver")
        suspended()
        own_worker.stop()  # Nothing of the run is in any process now.
        own_worker.start()
        submit(client, {"toolCallId": "call-transfer", "approved": True})
        state = finished("s-1")
    finally:
        own_worker.stop()

    assert state.status == SessionStatus.COMPLETED
    assert state.custom_state == {"transfers": [7]}


def test_an_expired_suspended_session_is_failed_by_the_cleanup(worker, owner):
    client = client_of(owner)
    start(client, "approver")
    suspended()
    client.patch("/api/sessions/s-1/", {"expiresAt": "2020-01-01T00:00:00Z"}, format="json")

    report = reap_expired_sessions(error="Nobody answered")

    state = get_session_store().load_state("s-1")
    assert report.reaped == ["s-1"]
    assert (state.status, state.error, state.failure_reason) == (
        SessionStatus.FAILED,
        "Nobody answered",
        EXPIRED_FAILURE_REASON,
    )
    assert get_session_store().get_current_run("s-1").status == RunStatus.FAILED
    assert get_stream_manager().get_stream_info(state.stream_id).error == "Nobody answered"
    late = submit(client, {"toolCallId": "call-transfer", "approved": True})
    assert late.json()["error"]["code"] == "unknown-tool-call"


def test_aborting_a_suspended_session_fails_its_run(worker, owner):
    client = client_of(owner)
    start(client, "approver")
    suspended()

    answer = client.post("/api/sessions/s-1/abort", {"reason": "no"}, format="json")

    assert answer.status_code == 202
    assert get_session_store().get_current_run("s-1").status == RunStatus.FAILED
    assert get_session_store().load_state("s-1").status == SessionStatus.FAILED


def test_the_chat_response_closes_at_the_suspension(worker, owner):
    body = {
        "id": "s-1",
        "agentType": "approver",
        "messages": [{"id": "u-1", "role": "user", "parts": [{"type": "text", "text": "Go."}]}],
    }

    status, _, parts = post_chat(owner, body)

    assert status == 200
    assert {"type": "tool-approval-request", "approvalId": "call-transfer"}.items() <= next(
        p for p in parts if isinstance(p, dict) and p["type"] == "tool-approval-request"
    ).items()
    assert parts[-2:] == [{"type": "finish", "finishReason": "tool-calls"}, "[DONE]"]
    assert get_session_store().load_state("s-1").status == SessionStatus.SUSPENDED_CLIENT_TOOL
