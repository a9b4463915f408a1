"""Agents the MCP tests run; the worker and Daphne subprocesses import this module too.

The fixture server's address comes from the environment (`HELIX_TEST_MCP_URL`, its base URL;
`FIXTURE_CALLS_LOG` and `FIXTURE_KEY` are passed on to a stdio server), read each time an agent
is built, so every process builds the same agents once the tests have set it.

Every agent here plays a plan: the last user message is a JSON list of steps, each a list of
`[tool name, arguments]` calls made in that step. After the plan it answers
`Results: <each tool message, in order, joined by " | ">` and, on a second line,
`Tools: <the tools it was offered, sorted>`.
"""

import json
import os
import sys
from pathlib import Path

from agents_app.definitions.agent import Agent
from agents_app.definitions.mcp_servers import McpServer
from agents_app.definitions.registry import AgentFactoryContext, get_registry
from agents_app.llm.scripted import ScriptedToolCall, Turn, register_script, turn_step
from sessions_app.stores.types import MessageRole

FIXTURE = Path(__file__).resolve().with_name("fixture_server.py")
# Nothing listens here: the port is reserved for it by the tests (see conftest).
UNREACHABLE_URL_VARIABLE = "HELIX_TEST_MCP_UNREACHABLE"
# Long enough for a quick call on a starved CI machine (one took more than 1.5 s), short enough
# for the timeout tests, whose slow calls take 10 s.
SLOW_TIMEOUT_SECONDS = 5


def plan_script(request, context) -> Turn:
    """Make the calls the plan in the last user message gives for this step, then report."""
    users = [i for i, m in enumerate(request.messages) if m.role == MessageRole.USER]
    plan = json.loads(request.messages[users[-1]].content)
    step = turn_step(request)
    if step < len(plan):
        return Turn(
            tool_calls=[ScriptedToolCall(name=name, arguments=args) for name, args in plan[step]]
        )
    results = [m.content for m in request.messages[users[-1] :] if m.role == MessageRole.TOOL]
    tools = sorted(tool.name for tool in request.tools)
    return Turn(text=f"Results: {' | '.join(results)}\nTools: {', '.join(tools)}")


def fixture_url(path: str = "/mcp") -> str:
    return os.environ["HELIX_TEST_MCP_URL"] + path


def http_agent(context: AgentFactoryContext) -> Agent:
    """Tools of the fixture server over HTTP, as two servers with different rules, beside one
    that cannot be reached."""
    return Agent(
        name="mcp_http",
        mcp_servers=[
            McpServer(
                name="fixture",
                url=fixture_url(),
                denied_tools=["effect"],
                needs_approval=["transfer"],
                timeout_seconds=SLOW_TIMEOUT_SECONDS,
            ),
            McpServer(name="patient", url=fixture_url(), allowed_tools=["effect"]),
            McpServer(name="gone", url=os.environ[UNREACHABLE_URL_VARIABLE], timeout_seconds=1),
        ],
    )


def stdio_agent(context: AgentFactoryContext) -> Agent:
    """Tools of the fixture server started as a process, over stdio."""
    env = {name: os.environ[name] for name in ("FIXTURE_CALLS_LOG",) if name in os.environ}
    return Agent(
        name="mcp_stdio",
        mcp_servers=[
            McpServer(
                name="local",
                command=sys.executable,
                args=[str(FIXTURE), "stdio"],
                env=env,
                timeout_seconds=SLOW_TIMEOUT_SECONDS,
            )
        ],
    )


def talk_script(request, context) -> Turn:
    """Say what was heard and how many messages came so far; `slowly ...` takes seconds."""
    heard = [m.content for m in request.messages if m.role == MessageRole.USER]
    if heard[-1].startswith("slowly"):
        return Turn(text=" ".join(["la"] * 300), delay=0.05)
    return Turn(text=f"Heard {heard[-1]} ({len(heard)} so far)", delay=0.02)


SESSION_AGENT = Agent(name="mcp_session", mcp_session_servers=True)
TALKER = Agent(name="mcp_talker", description="Says what it heard.")
CLOSED_AGENT = Agent(name="mcp_closed")

registry = get_registry()
for agent_type, factory in (("mcp_http", http_agent), ("mcp_stdio", stdio_agent)):
    if not registry.has(agent_type):
        registry.register_factory(agent_type, factory)
        register_script(agent_type, plan_script)
for agent, script in (
    (SESSION_AGENT, plan_script),
    (CLOSED_AGENT, plan_script),
    (TALKER, talk_script),
):
    if not registry.has(agent.name):
        registry.register(agent)
        register_script(agent.name, script)
