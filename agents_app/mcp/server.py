"""Helix as an MCP server: every registered agent is a tool (served at `/mcp` by `http`).

A tool's input is `{message, sessionId?}`; its result is the run's final output, as text, with
`{sessionId, runId, status, output}` as structured content, so a client can continue the
session with its next call. While the run goes, each piece of its text goes out as a progress
notification (when the client sent a progress token). A call the client cancels interrupts the
run. A run that fails, is interrupted or suspends (waiting for a person) is an error result
saying so; a call naming a session the caller does not own is answered as one naming a missing
session. Calls count against `HELIX["RUN_START_RATE"]` as the API's run starts do, and input no
database stores (a NUL character) is refused as the API refuses it.
"""

import json
from types import SimpleNamespace
from typing import Annotated, Any

import anyio
import mcp_types as types
from channels.db import database_sync_to_async
from django.contrib.auth.models import AbstractBaseUser
from mcp import MCPError
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from agents_app.definitions.registry import get_registry
from agents_app.mcp.calls import RunEnding, agent_call_interrupt, agent_call_start, follow_run
from agents_app.runs.throttles import RunStartThrottle
from sessions_app.errors import HelixError, error_body
from sessions_app.storable import unstorable_character, unstorable_text

SERVER_NAME = "helix"
INSTRUCTIONS = (
    "Each tool runs a Helix agent on the message you give it and answers with the agent's "
    "final output. Pass the sessionId a result gives to continue that conversation."
)


def _storable(text: str) -> str:
    """Refuse what no database stores, as the API does (`sessions_app.middleware`)."""
    if kind := unstorable_character(text):
        raise ValueError(f"holds {unstorable_text(kind)}, which no database stores")
    return text


StorableText = Annotated[str, AfterValidator(_storable)]


class AgentCall(BaseModel):
    """The input of an agent's tool."""

    model_config = ConfigDict(extra="forbid")

    message: StorableText = Field(min_length=1, description="What to ask the agent.")
    sessionId: StorableText | None = Field(
        default=None,
        description="Continue this session (from an earlier result); omit to start a new one.",
    )


class AgentCallResult(BaseModel):
    """The structured result of an agent's tool."""

    sessionId: str = Field(description="Pass it back to continue the conversation.")
    runId: str
    status: str = Field(description="completed, failed, interrupted or suspended.")
    output: Any = Field(default=None, description="The run's final output.")


INPUT_SCHEMA = AgentCall.model_json_schema()
OUTPUT_SCHEMA = AgentCallResult.model_json_schema()


def build_server() -> Server:
    """Return the low-level SDK server that offers the registered agents as tools."""
    return Server(
        SERVER_NAME,
        version="1",
        instructions=INSTRUCTIONS,
        on_list_tools=_list_tools,
        on_call_tool=_call_tool,
    )


def agent_tools() -> list[types.Tool]:
    """Return a tool for each registered agent type."""
    registry = get_registry()
    tools = []
    for agent_type in registry.registered_types():
        agent = registry.get(agent_type)
        description = agent.description if agent is not None and agent.description else ""
        tools.append(
            types.Tool(
                name=agent_type,
                description=description or f"Ask the {agent_type} agent.",
                input_schema=INPUT_SCHEMA,
                output_schema=OUTPUT_SCHEMA,
            )
        )
    return tools


async def _list_tools(
    ctx: ServerRequestContext, params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    return types.ListToolsResult(tools=await database_sync_to_async(agent_tools)())


async def _call_tool(
    ctx: ServerRequestContext, params: types.CallToolRequestParams
) -> types.CallToolResult:
    user = caller(ctx)
    if not get_registry().has(params.name):
        raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {params.name}")
    try:
        call = AgentCall.model_validate(params.arguments or {})
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
        return _error(f"Invalid input: {problems}", "invalid-input", {})
    if (wait := await database_sync_to_async(_throttled)(user)) is not None:
        return _error(f"Too many runs started; try again in {wait:.0f} s.", "throttled", {})
    try:
        run = await database_sync_to_async(agent_call_start)(
            user=user, agent_type=params.name, message=call.message, session_id=call.sessionId
        )
    except HelixError as error:
        return _error(error.message, error.code, error.details)
    progress = _Progress(ctx)
    try:
        ending = await follow_run(run, progress.report)
    except anyio.get_cancelled_exc_class():
        with anyio.CancelScope(shield=True):
            await database_sync_to_async(agent_call_interrupt)(user=user, session_id=run.session_id)
        raise
    return _result(run.session_id, run.run_id, ending)


def caller(ctx: ServerRequestContext) -> AbstractBaseUser:
    """Return the user the `/mcp` endpoint authenticated for the request."""
    request = ctx.request
    user = request.scope.get("user") if request is not None else None
    if user is None or not user.is_authenticated:
        raise MCPError(types.INVALID_REQUEST, "Not authenticated.")
    return user


def _throttled(user: AbstractBaseUser) -> float | None:
    """Return how long the user must wait to start a run (`HELIX["RUN_START_RATE"]`), if at all."""
    throttle = RunStartThrottle()
    if throttle.allow_request(SimpleNamespace(user=user), None):
        return None
    return throttle.wait() or 1.0


class _Progress:
    """Send a run's text pieces as progress notifications, counting them."""

    def __init__(self, ctx: ServerRequestContext) -> None:
        self.ctx = ctx
        self.pieces = 0

    async def report(self, text: str) -> None:
        self.pieces += 1
        await self.ctx.session.report_progress(self.pieces, message=text)


def _result(session_id: str, run_id: str, ending: RunEnding) -> types.CallToolResult:
    structured = AgentCallResult(
        sessionId=session_id, runId=run_id, status=ending.status, output=ending.output
    ).model_dump(mode="json")
    if ending.status == "completed":
        output = ending.output
        text = output if isinstance(output, str) else json.dumps(output)
        return types.CallToolResult(
            content=[types.TextContent(text=text)], structured_content=structured
        )
    message = (
        f"The run {ending.status}: {ending.error}" if ending.error else f"The run {ending.status}."
    )
    return types.CallToolResult(
        content=[types.TextContent(text=message)], structured_content=structured, is_error=True
    )


def _error(message: str, code: str, details: dict[str, Any]) -> types.CallToolResult:
    """Return an error result; its structured content is the API's error body."""
    return types.CallToolResult(
        content=[types.TextContent(text=message)],
        structured_content=error_body(code, message, details),
        is_error=True,
    )
