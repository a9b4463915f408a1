"""An MCP server's header secret is used, and shown nowhere: not in any API response, admin page,
WebSocket frame or stream chunk, nor in the worker's or Daphne's log."""

import asyncio
import json

import httpx
import pytest
import websockets
from django.test import Client as DjangoClient
from rest_framework.authtoken.models import Token

from agents_app.mcp.models import SessionMcpServer
from agents_app.runs.services import agent_session_create
from sessions_app.stores.types import SessionStatus
from tests.agents_app.mcp import mcp_agents
from tests.agents_app.mcp.conftest import CLIENT_SIDE, plan, settled

pytestmark = [pytest.mark.django_db(transaction=True), CLIENT_SIDE]

SESSION_ROUTES = (
    "",
    "mcp-servers",
    "messages",
    "runs",
    "checkpoints",
    "snapshot",
    "status",
    "usage",
    "history",
    "stream?fromSequence=0",
    "conversation",
)


def test_no_header_secret_shows_anywhere(daphne, worker, fixture_server, owner, django_user_model):
    secret = fixture_server.key
    site = f"http://127.0.0.1:{daphne.port}"
    api = httpx.Client(
        base_url=site,
        headers={"Authorization": f"Token {Token.objects.create(user=owner).key}"},
        timeout=30,  # The first server added loads the MCP SDK: seconds on a busy machine.
    )
    session_id = agent_session_create(user=owner, agent_type="mcp_session").session_id
    pages: dict[str, str] = {}

    added = api.post(
        f"/api/sessions/{session_id}/mcp-servers",
        json={
            "name": "vault",
            "url": mcp_agents.fixture_url("/secure/mcp"),
            "headers": {"X-Fixture-Key": secret},
        },
    )
    started = api.post(
        f"/api/sessions/{session_id}/start",
        json={
            "agentType": "mcp_session",
            "input": {"message": plan([("vault__echo", {"text": "through the vault"})])},
        },
    )
    pages["add"], pages["start"] = added.text, started.text
    assert (added.status_code, added.json()["state"]) == (201, "ready"), added.text
    state = settled(session_id)

    # The header was sent: the server answered only because it got the secret.
    assert state.status == SessionStatus.COMPLETED, state.error
    assert state.output.startswith('Results: {"result": "echo: through the vault"}')
    assert SessionMcpServer.objects.get(session_id=session_id).headers == {"X-Fixture-Key": secret}

    for route in SESSION_ROUTES:
        response = api.get(f"/api/sessions/{session_id}/{route}")
        assert response.status_code == 200, (route, response.text)
        pages[route or "session"] = response.text
    pages["sessions"] = api.get("/api/sessions/").text
    pages["websocket"] = asyncio.run(
        mcp_frames(daphne.port, api.headers["Authorization"], session_id)
    )

    admin = django_user_model.objects.create_superuser("admin", password="pw")
    server_pk = SessionMcpServer.objects.get(session_id=session_id).pk
    for user, path in (
        (admin, "/admin/agents_app/sessionmcpserver/"),
        (admin, f"/admin/agents_app/sessionmcpserver/{server_pk}/change/"),
        (admin, "/admin/sessions_app/agentsession/"),
        (admin, f"/admin/sessions_app/agentsession/{session_id}/change/"),
        (owner, f"/chat/mcp_session/{session_id}/"),
    ):
        response = httpx.get(site + path, cookies=signed_in(user))
        assert response.status_code == 200, (path, response.text[:500])
        pages[path] = response.text
    pages["worker log"] = worker.read_log()
    pages["daphne log"] = daphne.log.read_text()

    assert "X-Fixture-Key" in pages["mcp-servers"]  # The header's name is shown...
    assert "vault__echo" in pages["worker log"] + pages["history"]  # ...and these saw the run.
    assert [where for where, text in pages.items() if secret in text] == []


def signed_in(user) -> dict[str, str]:
    """Return the cookies of a browser signed in as `user`."""
    browser = DjangoClient()
    browser.force_login(user)
    return {"sessionid": browser.cookies["sessionid"].value}


async def mcp_frames(port: int, authorization: str, session_id: str) -> str:
    """Return the `cf_agent_mcp_servers` frames a socket gets until the server shows ready."""
    frames = []
    url = f"ws://127.0.0.1:{port}/agents/mcp-session/{session_id}"
    async with websockets.connect(url, additional_headers={"Authorization": authorization}) as ws:
        async with asyncio.timeout(30):
            while True:
                frame = json.loads(await ws.recv())
                if frame["type"] == "cf_agent_mcp_servers":
                    frames.append(frame)
                    if frame["mcp"]["servers"].get("vault", {}).get("state") == "ready":
                        return json.dumps(frames)
