"""Agents use MCP servers' tools through a real Celery worker: a real MCP server written with the
SDK (streamable HTTP, and the same server over stdio), offering a fast, a slow, a failing, an
image-returning and an approval-gated tool, and one that adds a tool at run time.
"""

import base64
import json
import os
import uuid

import pytest
from django.conf import settings
from django.test import override_settings

from agents_app.definitions.mcp_servers import McpServer
from agents_app.definitions.registry import AgentFactoryContext, get_registry
from agents_app.mcp.client import get_pool
from agents_app.mcp.tools import mcp_tools
from agents_app.runs import services
from agents_app.runs.tool_results import tool_result_submit
from sessions_app.stores import get_session_store
from sessions_app.stores.types import MessageRole, SessionStatus
from tests.agents_app.mcp import mcp_agents
from tests.agents_app.mcp.conftest import CLIENT_SIDE, SUSPENDED, plan, settled, stream_chunks
from tests.agents_app.mcp.fixture_server import PIXEL

pytestmark = [pytest.mark.django_db(transaction=True), CLIENT_SIDE]

HTTP_TOOLS = [
    "fixture__echo",
    "fixture__fail",
    "fixture__grow",
    "fixture__image",
    "fixture__slow",
    "fixture__transfer",
    "patient__effect",
]
FAILED = "McpToolFailed: Error executing tool fail: failed on purpose: "
TIMED_OUT = f"McpCallTimeout: slow did not answer within {mcp_agents.SLOW_TIMEOUT_SECONDS} s."


def run(owner, agent_type: str, *steps) -> str:
    """Start a plan run; return its session id."""
    return services.agent_start(user=owner, agent_type=agent_type, message=plan(*steps)).session_id


def tool_messages(session_id: str) -> list[tuple[str, str]]:
    messages = get_session_store().get_messages(session_id, limit=100).messages
    return [(m.name, m.content) for m in messages if m.role == MessageRole.TOOL]


def tool_results(session_id: str) -> dict[str, tuple[object, bool]]:
    """Return the stream's tool results by tool name (parallel calls end in any order)."""
    return {
        c["toolName"]: (c["result"], c["isError"])
        for c in stream_chunks(session_id)
        if c["type"] == "tool_result"
    }


def assert_http_tools(names) -> None:
    """Check the tools the HTTP agent gets (tests may have added some to the server).

    The unreachable server offers none, and the step goes on without them; `effect` is denied
    to `fixture` and the only tool `patient` allows.
    """
    assert set(HTTP_TOOLS) <= set(names)
    others = [name for name in names if name.startswith(("gone__", "patient__"))]
    assert others == ["patient__effect"]
    assert "fixture__effect" not in names


def answer(session_id: str) -> tuple[str, list[str]]:
    """Return the final answer's results line and the tools the model was offered."""
    output = get_session_store().load_state(session_id).output
    results, tools = output.rsplit("\n", 1)
    return results.removeprefix("Results: "), tools.removeprefix("Tools: ").split(", ")


def test_mcp_tools_reach_the_model_namespaced_and_their_results_land_in_messages_and_stream(
    worker, owner, fixture_server
):
    session_id = run(owner, "mcp_http", [("fixture__echo", {"text": "hi"}), ("fixture__image", {})])

    state = settled(session_id)

    assert state.status == SessionStatus.COMPLETED, state.error
    pixel = base64.b64encode(PIXEL).decode()
    image = {"content": [{"type": "image", "data": pixel, "mimeType": "image/png"}]}
    assert tool_results(session_id) == {
        "fixture__echo": ({"result": "echo: hi"}, False),
        "fixture__image": (image, False),
    }
    assert tool_messages(session_id) == [
        ("fixture__echo", json.dumps({"result": "echo: hi"})),
        ("fixture__image", json.dumps(image)),
    ]
    assert_http_tools(answer(session_id)[1])
    assert sorted(call["tool"] for call in fixture_server.calls()[-2:]) == ["echo", "image"]


def test_a_failing_and_a_timed_out_call_become_error_results_and_the_run_goes_on(
    worker, owner, fixture_server
):
    session_id = run(
        owner,
        "mcp_http",
        [("fixture__fail", {"why": "testing"}), ("fixture__slow", {"seconds": 10})],
    )

    state = settled(session_id)

    assert state.status == SessionStatus.COMPLETED, state.error
    assert tool_results(session_id) == {
        "fixture__fail": ({"error": FAILED + "testing"}, True),
        "fixture__slow": ({"error": TIMED_OUT}, True),
    }


def test_an_approval_gated_mcp_tool_suspends_the_run_and_runs_once_approved(
    worker, owner, fixture_server
):
    session_id = run(owner, "mcp_http", [("fixture__transfer", {"amount": 7})])
    state = settled(session_id, SUSPENDED)
    [(call_id, entry)] = state.pending_client_tool_calls.items()

    assert (entry["toolName"], entry["kind"], entry["input"]) == (
        "fixture__transfer",
        "approval",
        {"amount": 7},
    )
    assert fixture_server.calls("transfer") == []  # Nothing ran before the approval.

    tool_result_submit(user=owner, session_id=session_id, tool_call_id=call_id, approved=True)
    state = settled(session_id)

    assert state.status == SessionStatus.COMPLETED, state.error
    assert fixture_server.calls("transfer") == [{"tool": "transfer", "arguments": {"amount": 7}}]
    assert json.loads(answer(session_id)[0]) == {"sent": 7}  # The server sends it as text.


def test_a_tool_the_server_adds_and_announces_is_offered_at_the_next_step(
    worker, owner, fixture_server
):
    name = f"double_{uuid.uuid4().hex[:8]}"
    session_id = run(
        owner,
        "mcp_http",
        [("fixture__grow", {"name": name})],
        [(f"fixture__{name}", {"x": 21})],
    )

    state = settled(session_id)

    assert state.status == SessionStatus.COMPLETED, state.error
    assert tool_results(session_id)[f"fixture__{name}"] == ({"result": 42}, False)
    assert f"fixture__{name}" in answer(session_id)[1]


def test_the_same_server_over_stdio_serves_results_errors_and_timeouts(
    worker, owner, fixture_server
):
    session_id = run(
        owner,
        "mcp_stdio",
        [
            ("local__echo", {"text": "over stdio"}),
            ("local__fail", {"why": "stdio"}),
            ("local__slow", {"seconds": 10}),
        ],
    )

    state = settled(session_id)

    assert state.status == SessionStatus.COMPLETED, state.error
    assert tool_results(session_id) == {
        "local__echo": ({"result": "echo: over stdio"}, False),
        "local__fail": ({"error": FAILED + "stdio"}, True),
        "local__slow": ({"error": TIMED_OUT}, True),
    }
    assert "local__grow" in answer(session_id)[1]
    assert {"tool": "echo", "arguments": {"text": "over stdio"}} in fixture_server.calls()


def test_agent_tools_carry_the_servers_input_schemas(fixture_server, owner):
    agent = get_registry().resolve(
        "mcp_http", AgentFactoryContext(session_id="s", run_id="r", user_id=None)
    )
    state = get_session_store().create_session("schemas", agent_type="mcp_http", owner_id=owner.pk)

    tools = {tool.name: tool for tool in mcp_tools(agent, state)}

    assert_http_tools(tools)
    assert tools["fixture__echo"].json_schema() == {
        "type": "object",
        "properties": {"text": {"title": "Text", "type": "string"}},
        "required": ["text"],
        "title": "echoArguments",
    }
    assert tools["fixture__transfer"].needs_approval
    assert not tools["fixture__echo"].needs_approval


def test_an_unreachable_server_is_failed_with_the_reason(fixture_server):
    gone = McpServer(name="gone", url=os.environ[mcp_agents.UNREACHABLE_URL_VARIABLE])

    [catalog] = get_pool().catalogs([gone], timeout=10)

    assert (catalog.state, catalog.tools) == ("failed", ())
    assert catalog.error == "ConnectError: All connection attempts failed"


def test_a_tool_list_is_listed_again_once_older_than_the_ttl(fixture_server):
    """A change the server does not announce shows once the list is past its TTL."""
    server = McpServer(name="fixture", url=mcp_agents.fixture_url())
    name = f"quiet_{uuid.uuid4().hex[:8]}"
    pool = get_pool()
    pool.catalogs([server], timeout=10)

    pool.call_tool(server, "grow", {"name": name, "announce": False}, timeout=10)
    before = pool.catalogs([server], timeout=10)[0]
    with override_settings(HELIX={**settings.HELIX, "MCP_TOOLS_TTL_SECONDS": 0}):
        after = pool.catalogs([server], timeout=10)[0]

    assert name not in {tool.name for tool in before.tools}
    assert name in {tool.name for tool in after.tools}
