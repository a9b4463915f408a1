"""Helix as an MCP server: `/mcp` on a live Daphne, driven by the SDK's own client, with the
runs on a real Celery worker."""

import anyio
import httpx
import httpx2
import mcp_types as types
import pytest
from django.test import Client as DjangoClient
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from rest_framework.authtoken.models import Token

from agents_app.runs.services import agent_session_create
from sessions_app.stores import get_session_store
from sessions_app.stores.types import MessageRole, RunStatus, SessionStatus
from tests.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

CALL_TIMEOUT = 60


@pytest.fixture
def token(owner) -> str:
    return Token.objects.create(user=owner).key


def connect(daphne, headers: dict[str, str]) -> "_Connected":
    return _Connected(f"http://127.0.0.1:{daphne.port}/mcp", headers)


class _Connected:
    """An SDK client session to `/mcp`, sending `headers` with every request."""

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        self.url = url
        self.headers = headers

    async def __aenter__(self) -> Client:
        self.http = httpx2.AsyncClient(headers=self.headers, timeout=httpx2.Timeout(30, read=300))
        self.client = Client(streamable_http_client(self.url, http_client=self.http), cache=None)
        await self.http.__aenter__()
        return await self.client.__aenter__()

    async def __aexit__(self, *exc) -> None:
        await self.client.__aexit__(*exc)
        await self.http.__aexit__(*exc)


async def call(client: Client, message: str, session_id: str | None = None):
    """Call the talker; return its result and the progress messages that came before it."""
    pieces: list[str] = []

    async def progress(value: float, total: float | None, text: str | None) -> None:
        pieces.append(text)

    arguments = {"message": message} | ({"sessionId": session_id} if session_id else {})
    with anyio.fail_after(CALL_TIMEOUT):
        result = await client.call_tool("mcp_talker", arguments, progress_callback=progress)
    return result, pieces


def test_mcp_clients_list_agents_call_them_with_progress_continue_sessions_and_cancel(
    daphne, owner, token
):
    outcome = {}

    async def scenario() -> None:
        async with connect(daphne, {"Authorization": f"Bearer {token}"}) as client:
            listed = {tool.name: tool for tool in (await client.list_tools()).tools}
            outcome["listed"] = listed
            first, first_pieces = await call(client, "hello")
            session_id = first.structured_content["sessionId"]
            second, second_pieces = await call(client, "again", session_id)
            outcome.update(first=(first, first_pieces), second=(second, second_pieces))

            started = anyio.Event()

            async def progress(value: float, total: float | None, text: str | None) -> None:
                started.set()

            async def slow_call() -> None:
                await client.call_tool(
                    "mcp_talker",
                    {"message": "slowly now", "sessionId": session_id},
                    progress_callback=progress,
                )
                outcome["not cancelled"] = True

            with anyio.fail_after(CALL_TIMEOUT):
                async with anyio.create_task_group() as calls:
                    calls.start_soon(slow_call)
                    await started.wait()
                    calls.cancel_scope.cancel()  # The client gives up on the call mid-run.

    anyio.run(scenario)

    listed = outcome["listed"]
    assert {"mcp_talker", "mcp_http", "counter"} <= set(listed)
    talker = listed["mcp_talker"]
    assert talker.description == "Says what it heard."
    assert set(talker.input_schema["properties"]) == {"message", "sessionId"}
    assert talker.input_schema["required"] == ["message"]

    first, first_pieces = outcome["first"]
    session_id = first.structured_content["sessionId"]
    assert not first.is_error
    assert first.content[0].text == "Heard hello (1 so far)"
    assert "".join(first_pieces) == "Heard hello (1 so far)"
    assert len(first_pieces) > 1  # The text came as it was written, in several pieces.
    assert first.structured_content["status"] == "completed"
    assert first.structured_content["output"] == "Heard hello (1 so far)"

    second, second_pieces = outcome["second"]
    assert second.structured_content["sessionId"] == session_id
    assert second.content[0].text == "Heard again (2 so far)"
    assert "".join(second_pieces) == "Heard again (2 so far)"

    assert "not cancelled" not in outcome
    store = get_session_store()
    interrupted = wait_for(
        lambda: (run := store.get_current_run(session_id)).status == RunStatus.INTERRUPTED and run,
        what="the cancelled call's run to be interrupted",
    )
    assert interrupted.run_id not in {
        first.structured_content["runId"],
        second.structured_content["runId"],
    }
    state = store.load_state(session_id)
    assert (state.status, state.owner_id, state.source) == (
        SessionStatus.INTERRUPTED,
        owner.pk,
        "mcp",
    )
    heard = [
        m.content for m in store.get_messages(session_id).messages if m.role == MessageRole.USER
    ]
    assert heard == ["hello", "again", "slowly now"]
    # An ordinary session: the API shows it to its owner.
    api = httpx.get(
        f"http://127.0.0.1:{daphne.port}/api/sessions/{session_id}/",
        headers={"Authorization": f"Token {token}"},
    )
    assert (api.status_code, api.json()["source"]) == (200, "mcp")


def test_another_users_session_id_answers_as_a_missing_one(daphne, owner, stranger, token):
    theirs = agent_session_create(user=stranger, agent_type="mcp_talker").session_id
    results = {}

    async def scenario() -> None:
        async with connect(daphne, {"Authorization": f"Token {token}"}) as client:
            for name, session_id in (("theirs", theirs), ("missing", "no-such-session")):
                results[name], _ = await call(client, "hello", session_id)

    anyio.run(scenario)

    def without_id(result: types.CallToolResult, session_id: str) -> str:
        return result.model_dump_json().replace(session_id, "ID")

    assert results["theirs"].is_error
    assert results["theirs"].content[0].text == f"Session {theirs!r} does not exist."
    assert without_id(results["theirs"], theirs) == without_id(
        results["missing"], "no-such-session"
    )
    assert get_session_store().get_current_run(theirs) is None  # Nothing ran on it.


def test_a_message_no_database_stores_is_refused_and_starts_nothing(daphne, owner, token):
    async def scenario() -> types.CallToolResult:
        async with connect(daphne, {"Authorization": f"Token {token}"}) as client:
            return (await call(client, "a\x00b"))[0]

    result = anyio.run(scenario)

    assert result.is_error
    assert result.structured_content["error"]["code"] == "invalid-input"
    assert "message: Value error, holds a NUL character" in result.content[0].text
    assert get_session_store().list_sessions(owner_id=owner.pk).total == 0


def test_mcp_requires_a_token_or_a_signed_in_session(daphne, owner):
    url = f"http://127.0.0.1:{daphne.port}/mcp"
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}

    anonymous = httpx.post(url, json=body)
    wrong = httpx.post(url, json=body, headers={"Authorization": "Bearer not-a-token"})

    assert anonymous.status_code == wrong.status_code == 401
    assert anonymous.json()["error"]["code"] == "not-authenticated"
    assert anonymous.headers["www-authenticate"] == 'Bearer realm="helix"'

    browser = DjangoClient()
    browser.force_login(owner)
    cookie = {"Cookie": f"sessionid={browser.cookies['sessionid'].value}"}
    listed = {}

    async def scenario() -> None:
        async with connect(daphne, cookie) as client:
            listed["tools"] = [tool.name for tool in (await client.list_tools()).tools]

    anyio.run(scenario)

    assert "mcp_talker" in listed["tools"]
    cross_site = httpx.post(url, json=body, headers={**cookie, "Origin": "https://evil.example"})
    assert cross_site.status_code == 403
