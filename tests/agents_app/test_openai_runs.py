"""Runs on a real Celery worker whose model is a real local server speaking OpenAI's streaming chat
completions, through the OpenAI-compatible adapter: the reply reaches the stream as it comes,
and an interrupt ends the step's wait on its model at once, the server seeing the client go."""

import time

import pytest

from agents_app.runs import services
from sessions_app.stores.types import SessionStatus
from tests.agents_app.llm.chat_server import ChatServer, Stream, chunk, text_reply
from tests.agents_app.runs import chunk_types, finished, text_of
from tests.agents_app.worker import module_worker
from tests.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def chat_server():
    server = ChatServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def worker(django_db_setup, django_db_blocker, tmp_path_factory, chat_server):
    with module_worker(
        django_db_blocker,
        tmp_path_factory,
        LLM_BACKEND="agents_app.llm.openai_compat.OpenAICompatAdapter",
        LLM_BASE_URL=chat_server.url,
        LLM_MODEL="served-model",
        INTERRUPT_POLL_SECONDS="0.1",
    ) as running:
        yield running


def test_a_run_streams_the_servers_reply_and_completes_with_it(worker, chat_server, owner):
    chat_server.reply(text_reply("Hel", "lo ", "there."))

    started = services.agent_start(user=owner, agent_type="talker", message="Hi.")

    state = finished(started.session_id)
    assert state.status == SessionStatus.COMPLETED
    assert state.output == "Hello there."
    assert text_of(started.stream_id) == "Hello there."
    assert state.step_count == 1
    sent = chat_server.requests[-1]
    assert sent.body["model"] == "served-model"
    assert sent.body["messages"][-1] == {"role": "user", "content": "Hi."}


def test_an_interrupt_ends_the_wait_on_the_model_and_its_connection(worker, chat_server, owner):
    chat_server.hung_up.clear()
    words = [chunk({"content": f"word{n} "}) for n in range(10)]
    chat_server.reply(Stream([*words, chunk(finish="stop")], delay=4))
    started = services.agent_start(user=owner, agent_type="talker", message="Talk.")
    wait_for(lambda: "word0 " in text_of(started.stream_id), what="the model to start talking")

    asked_at = time.monotonic()
    services.agent_interrupt(user=owner, session_id=started.session_id, reason="enough")

    state = finished(started.session_id)
    assert time.monotonic() - asked_at < 2.0  # Not at the model's next word, 4 s away.
    assert state.status == SessionStatus.INTERRUPTED
    assert chunk_types(started.stream_id)[-1] == "run_interrupted"
    # The step's read of the reply was ended by shutting its connection down.
    assert chat_server.hung_up.wait(2.0)
