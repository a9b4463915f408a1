"""`/api/sessions/{id}/mcp-servers`: a session's MCP servers, listed, added and removed, with the
same ownership rules as every session route; header values are taken and never shown."""

import pytest
from rest_framework.test import APIClient

from agents_app.mcp.models import SessionMcpServer
from agents_app.runs.services import agent_session_create
from tests.agents_app.mcp import mcp_agents
from tests.agents_app.mcp.conftest import CLIENT_SIDE

pytestmark = [pytest.mark.django_db(transaction=True), CLIENT_SIDE]


def client_of(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def servers_url(session_id: str) -> str:
    return f"/api/sessions/{session_id}/mcp-servers"


@pytest.fixture
def session_id(owner) -> str:
    return agent_session_create(user=owner, agent_type="mcp_session").session_id


def test_a_session_adds_lists_and_removes_its_own_servers(owner, session_id, fixture_server):
    client = client_of(owner)
    assert client.get(servers_url(session_id)).json() == {"servers": []}

    added = client.post(
        servers_url(session_id),
        {
            "name": "vault",
            "url": mcp_agents.fixture_url("/secure/mcp"),
            "headers": {"X-Fixture-Key": fixture_server.key},
            "allowedTools": ["echo", "transfer"],
            "needsApproval": ["transfer"],
            "timeoutSeconds": 5,
        },
        format="json",
    )

    assert added.status_code == 201, added.json()
    shown = {
        "name": "vault",
        "transport": "streamable-http",
        "url": mcp_agents.fixture_url("/secure/mcp"),
        "headerNames": ["X-Fixture-Key"],
        "allowedTools": ["echo", "transfer"],
        "deniedTools": [],
        "needsApproval": ["transfer"],
        "timeoutSeconds": 5.0,
        "source": "session",
    }
    assert added.json() == {**shown, "state": "ready", "error": None, "tools": ["echo", "transfer"]}
    assert client.get(servers_url(session_id)).json() == {"servers": [shown]}
    row = SessionMcpServer.objects.get(session_id=session_id)
    assert row.headers == {"X-Fixture-Key": fixture_server.key}  # Kept, to be sent.
    assert fixture_server.key not in repr(row) + str(row) + repr(row.as_server())

    removed = client.delete(servers_url(session_id) + "/vault")
    again = client.delete(servers_url(session_id) + "/vault")

    assert removed.status_code == 204
    assert again.status_code == 404
    assert again.json()["error"]["code"] == "mcp-server-not-found"
    assert client.get(servers_url(session_id)).json() == {"servers": []}


def test_a_server_that_refuses_the_headers_is_added_and_reported_failed(
    owner, session_id, fixture_server
):
    body = {
        "name": "locked",
        "url": mcp_agents.fixture_url("/secure/mcp"),
        "headers": {"X-Fixture-Key": "wrong"},
    }

    added = client_of(owner).post(servers_url(session_id), body, format="json")

    assert added.status_code == 201
    assert {key: added.json()[key] for key in ("state", "error", "tools")} == {
        "state": "failed",
        "error": "Server returned an error response",  # The SDK's account of the 401.
        "tools": [],
    }


def test_the_agents_own_servers_are_listed_and_their_names_are_taken(owner, fixture_server):
    http_session = agent_session_create(user=owner, agent_type="mcp_http").session_id

    listed = client_of(owner).get(servers_url(http_session)).json()["servers"]

    assert [(s["name"], s["source"], s["url"]) for s in listed] == [
        ("fixture", "agent", mcp_agents.fixture_url()),
        ("patient", "agent", mcp_agents.fixture_url()),
        ("gone", "agent", listed[2]["url"]),
    ]
    assert listed[0]["deniedTools"] == ["effect"]


URL = "http://x.test/mcp"


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"name": "bad name!", "url": URL}, "invalid-mcp-server"),
        ({"name": "files", "url": "file:///etc/passwd"}, "invalid-mcp-server"),
        ({"name": "creds", "url": "http://user:pw@x.test/mcp"}, "invalid-mcp-server"),
        (
            {"name": "both", "url": URL, "allowedTools": ["a"], "deniedTools": ["b"]},
            "invalid-mcp-server",
        ),
        (
            {"name": "crlf", "url": URL, "headers": {"X-Key": "a\r\nInjected: 1"}},
            "invalid-mcp-server",
        ),
        ({"name": "local", "url": URL, "command": "sh"}, "invalid-input"),
        ({"url": URL}, "invalid-input"),
    ],
)
def test_invalid_servers_are_refused_and_nothing_is_stored(owner, session_id, body, code):
    answer = client_of(owner).post(servers_url(session_id), body, format="json")

    assert answer.status_code == 400, answer.json()
    assert answer.json()["error"]["code"] == code
    assert "a\r\nInjected" not in answer.content.decode()
    assert not SessionMcpServer.objects.exists()


def test_names_are_unique_in_the_session_and_agents_must_allow_session_servers(
    owner, session_id, fixture_server
):
    client = client_of(owner)
    body = {"name": "twice", "url": mcp_agents.fixture_url()}
    assert client.post(servers_url(session_id), body, format="json").status_code == 201

    duplicate = client.post(servers_url(session_id), body, format="json")
    closed = agent_session_create(user=owner, agent_type="mcp_closed").session_id
    refused = client.post(servers_url(closed), body, format="json")

    assert (duplicate.status_code, duplicate.json()["error"]["code"]) == (409, "mcp-server-exists")
    assert (refused.status_code, refused.json()["error"]["code"]) == (
        403,
        "mcp-session-servers-disabled",
    )
    assert SessionMcpServer.objects.count() == 1


def test_another_users_session_answers_as_a_missing_one(owner, stranger, session_id):
    client = client_of(stranger)
    body = {"name": "mine", "url": "http://127.0.0.1:1/mcp"}

    answers = {
        which: [
            client.get(servers_url(target)),
            client.post(servers_url(target), body, format="json"),
            client.delete(servers_url(target) + "/mine"),
        ]
        for which, target in (("theirs", session_id), ("missing", "no-such-session"))
    }

    for theirs, missing in zip(answers["theirs"], answers["missing"], strict=True):
        assert theirs.status_code == missing.status_code == 404
        assert (
            theirs.json()["error"]["code"] == missing.json()["error"]["code"] == "session-not-found"
        )
    assert not SessionMcpServer.objects.exists()
