"""The `agents` npm `AgentClient` adds and removes a session's MCP server over the socket and is
sent `cf_agent_mcp_servers` in the shape its `onMcpUpdate` reads: the server ready with its
tools, then the list without it."""

import json
import shutil
import subprocess
from collections.abc import Iterator

import pytest
from rest_framework.authtoken.models import Token

from agents_app.mcp.models import SessionMcpServer
from tests.agents_app.mcp import mcp_agents
from tests.agents_app.mcp.conftest import AGENTS
from tests.live import ROOT, live_env
from tests.live_clients import Daphne

pytestmark = pytest.mark.django_db(transaction=True)

SCRIPTS = ROOT / "tests" / "js"
SERVER_KEYS = {"name", "server_url", "auth_url", "state", "error", "instructions", "capabilities"}


@pytest.fixture(scope="module")
def daphne(fixture_server, django_db_setup, tmp_path_factory) -> Iterator[Daphne]:
    folder = tmp_path_factory.mktemp("daphne")
    with Daphne(live_env(folder, HELIX_AGENTS=AGENTS), folder / "daphne.log") as server:
        yield server


@pytest.fixture
def node() -> str:
    executable = shutil.which("node")
    if executable is None:
        pytest.skip("Node.js is needed for the client tests")
    if not (SCRIPTS / "node_modules" / "agents").is_dir():
        pytest.skip("the client tests' packages are missing: run `npm ci --prefix tests/js`")
    return executable


def run_client(node: str, daphne: Daphne, token: str, *args: str) -> dict:
    result = subprocess.run(
        [node, str(SCRIPTS / "mcp_servers.mjs"), *args],
        env={**daphne.env, "HELIX_HOST": f"127.0.0.1:{daphne.port}", "HELIX_TOKEN": token},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr + daphne.log.read_text()
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    return {line.pop("step"): line for line in lines}


def test_the_agent_client_sees_a_server_it_adds_ready_with_its_tools_then_gone(
    node, daphne, owner, fixture_server
):
    token = Token.objects.create(user=owner).key
    url = mcp_agents.fixture_url()

    steps = run_client(node, daphne, token, "mcp-room", url)

    empty = {"prompts": [], "resources": [], "servers": {}, "tools": []}
    assert steps["connected"]["first"] == empty
    assert steps["added"]["result"] == {"id": "fixture", "state": "ready"}
    update = steps["added"]["update"]
    server = update["servers"]["fixture"]
    assert set(server) == SERVER_KEYS
    assert (server["name"], server["server_url"], server["state"], server["error"]) == (
        "fixture",
        url,
        "ready",
        None,
    )
    assert server["instructions"] == "A server for Helix's MCP tests."
    assert server["capabilities"]["tools"] == {"listChanged": True}
    tools = {tool["name"]: tool for tool in update["tools"]}
    assert {"echo", "slow", "fail", "image", "effect", "transfer", "grow"} <= set(tools)
    assert tools["echo"]["serverId"] == "fixture"
    assert tools["echo"]["inputSchema"]["required"] == ["text"]
    assert [(p["name"], p["serverId"]) for p in update["prompts"]] == [("greet", "fixture")]
    assert [(r["uri"], r["serverId"]) for r in update["resources"]] == [
        ("fixture://readme", "fixture")
    ]
    assert steps["removed"]["update"] == empty
    assert not SessionMcpServer.objects.exists()
