"""`/api/chat`: the unified chat routes answering in the AI SDK's UI message stream protocol."""

import json

import pytest
from rest_framework.test import APIClient

from sessions_app.stores import get_session_store
from tests.agents_app.chat_requests import post_chat

pytestmark = pytest.mark.django_db(transaction=True)


def user_message(text: str, number: int = 1) -> dict:
    return {"id": f"u-{number}", "role": "user", "parts": [{"type": "text", "text": text}]}


def text_of(parts: list) -> str:
    return "".join(p["delta"] for p in parts if isinstance(p, dict) and p["type"] == "text-delta")


def test_a_new_chat_streams_its_run_as_a_ui_message_stream(worker, owner):
    status, headers, parts = post_chat(
        owner, {"id": "c-1", "agentType": "counter", "messages": [user_message("Add 5")]}
    )

    assert status == 200
    assert headers["Content-Type"] == "text/event-stream"
    assert headers["x-vercel-ai-ui-message-stream"] == "v1"
    run_id = get_session_store().get_current_run("c-1").run_id
    assert parts[0] == {"type": "start", "messageId": run_id}
    assert [p["type"] for p in parts[1:5]] == [
        "start-step",
        "tool-input-available",
        "tool-output-available",
        "finish-step",
    ]
    assert parts[2]["input"] == {"amount": 5}
    assert text_of(parts) == "The counter is now 5."
    assert parts[-2:] == [{"type": "finish", "finishReason": "stop"}, "[DONE]"]


def test_the_same_chat_id_continues_the_conversation(worker, owner):
    post_chat(owner, {"id": "c-1", "agentType": "counter", "messages": [user_message("Add 5")]})

    _, _, parts = post_chat(
        owner, {"id": "c-1", "messages": [user_message("Add 5"), user_message("Add 2", 2)]}
    )

    assert text_of(parts) == "The counter is now 7."
    assert len(get_session_store().list_runs("c-1")) == 2


def test_reattaching_to_an_idle_chat_answers_204(worker, owner):
    post_chat(owner, {"id": "c-1", "agentType": "counter", "messages": [user_message("Add 1")]})
    client = APIClient()
    client.force_authenticate(owner)

    assert client.get("/api/chat/c-1/stream").status_code == 204


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ({"id": "c-1", "messages": [user_message("hi")]}, "agentType"),
        ({"id": "c-1", "agentType": "counter", "messages": []}, "last message"),
        (
            {"id": "c-1", "agentType": "counter", "messages": [{"role": "assistant", "parts": []}]},
            "last message",
        ),
        ({"id": "a/b", "agentType": "counter", "messages": [user_message("hi")]}, "id"),
        ({"id": 7, "agentType": "counter", "messages": [user_message("hi")]}, "Not a valid"),
        ({"id": "c-1", "agentType": "counter", "messages": "hi"}, "messages"),
    ],
)
@pytest.mark.usefixtures("private_queue")
def test_a_chat_request_without_what_a_run_needs_answers_400(owner, body, problem):
    client = APIClient()
    client.force_authenticate(owner)

    response = client.post("/api/chat", body, format="json")

    assert response.status_code == 400
    assert problem in json.dumps(response.json()["error"])
    assert get_session_store().load_state(str(body["id"])) is None


@pytest.mark.usefixtures("private_queue")
def test_an_interrupt_the_run_does_not_observe_in_time_answers_504(owner, settings):
    settings.HELIX = {**settings.HELIX, "INTERRUPT_OBSERVATION_SECONDS": 0.2}
    client = APIClient()
    client.force_authenticate(owner)
    client.post(
        "/api/sessions/c-1/start",
        {"agentType": "counter", "input": {"message": "Add 1"}},
        format="json",
    )  # No worker reads this test's queue: the run never looks at the flag.

    response = client.post("/api/chat/c-1/interrupt", {"reason": "stop"}, format="json")

    assert response.status_code == 504
    assert response.json()["error"]["code"] == "interrupt-not-observed"
    assert get_session_store().check_interrupt_flag("c-1").reason == "stop"


def test_an_interrupt_the_run_observes_answers_202(worker, owner):
    client = APIClient()
    client.force_authenticate(owner)
    client.post(
        "/api/sessions/c-1/start",
        {"agentType": "talker", "input": {"message": "Talk"}},
        format="json",
    )

    response = client.post("/api/chat/c-1/interrupt", {"reason": "enough"}, format="json")

    assert response.status_code == 202
    assert get_session_store().load_state("c-1").status == "interrupted"
    assert client.post("/api/chat/c-1/interrupt", {}, format="json").status_code == 409
