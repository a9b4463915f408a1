"""Agent and tool definitions (reference 001 `defineAgent` / `defineTool`), in Python.

A tool's input is a pydantic model; its JSON schema, from pydantic, is what the model sees. A tool
whose schema comes from elsewhere (an MCP server's) gives `input_schema` instead: the model sees
that schema as it is, and the arguments reach `execute` as a `SchemaInput`, unchecked beyond being
an object (the tool's server checks them).

How a run finishes (the executor enforces it; these are the pieces):

- An agent with an `output_schema` finishes only through its output tool, `final_output`
  (`OUTPUT_TOOL_NAME`), whose input model is that schema. The executor never runs that tool:
  it takes the call's arguments to `Agent.parse_output`, which returns the structured output
  in JSON form, or raises `ToolInputInvalid` naming the problems (the model is told, and may
  try again within `max_steps`).
- An agent without one finishes when a reply asks for no tool; the reply's text is its output.
"""

import copy
import functools
import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from asgiref.sync import async_to_sync
from pydantic import BaseModel, ConfigDict, ValidationError

from agents_app.definitions.hooks import AgentHooks
from agents_app.definitions.mcp_servers import McpServer
from agents_app.definitions.memory import AgentMemory
from agents_app.definitions.state import StateDraft, json_copy, storable_json_copy
from agents_app.definitions.state_sync import StateSync
from sessions_app.errors import HelixError

OUTPUT_TOOL_NAME = "final_output"
# How long a sub-agent may run before its call fails (reference 001: 10 minutes).
DEFAULT_SUB_AGENT_TIMEOUT = 600.0
# OpenAI's rule for function names, which the other providers accept too.
NAME_PATTERN = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


class InvalidDefinition(ValueError):
    """An agent or tool definition breaks a rule; raised when it is defined."""


class ToolInputInvalid(HelixError):
    """A tool call's arguments do not fit the tool's input model."""

    code = "invalid-tool-input"
    http_status = 400

    def __init__(self, tool_name: str, error: ValidationError) -> None:
        problems = _problems(error)
        summary = "; ".join(f"{p['location'] or 'input'}: {p['problem']}" for p in problems)
        super().__init__(
            f"Invalid input for {tool_name}: {summary}", tool=tool_name, problems=problems
        )
        self.tool_name = tool_name
        self.problems = problems


class ToolResultInvalid(ValueError):
    """A tool returned what is not JSON, or what does not fit its output model."""


class ToolContext(Protocol):
    """What a tool's `execute` receives beside its input; the executor implements it."""

    @property
    def session_id(self) -> str: ...

    @property
    def run_id(self) -> str: ...

    @property
    def agent_type(self) -> str: ...

    @property
    def step(self) -> int: ...

    @property
    def tool_call_id(self) -> str: ...

    @property
    def state(self) -> StateDraft:
        """Return the agent's custom state as this call sees it; write through it."""

    def emit(self, data: Any, *, name: str | None = None) -> None:
        """Write a custom chunk (`streams_app.chunks.Custom`) to the session's stream."""

    def record_usage(self, metric_type: str, name: str, value: float) -> None:
        """Record a custom usage metric with the step."""


ToolFunction = Callable[[Any, ToolContext], Any]


class SchemaInput(BaseModel):
    """The input of a tool defined by a JSON schema: any object; `model_dump()` gives it back."""

    model_config = ConfigDict(extra="allow")


@dataclass(frozen=True, kw_only=True)
class Tool:
    """A tool the model may call.

    `execute(input, ctx)` receives an instance of `input_model` and a `ToolContext`; it may be
    sync or async; given `input_schema` (the JSON schema of an object) instead of an
    `input_model`, it receives a `SchemaInput`. What it returns must have a JSON form (pydantic
    models are dumped); with an `output_model`, it must also validate as one.

    Two kinds of tool stop the run until a person acts (the run suspends; no worker waits):
    a client tool (`client=True`, no `execute`) is run by the client, which submits its result;
    an approval tool (`needs_approval=True`) runs on the server once a person approves the call,
    and a rejected call's result says so. A sub-agent tool (`sub_agent_tool`) runs another
    agent as a child session; the run suspends until the child is done.

    A call runs at most once, whatever happens to its worker: it is recorded before it runs and
    its outcome after, two writes of their own. A tool marked `idempotent` has its calls run
    again instead when their worker dies mid-step, and keeps no such records: mark one whose
    only effects are its result and the state it writes (both commit with the step), or whose
    effects are safe to repeat.
    """

    name: str
    description: str
    input_model: type[BaseModel] | None = None
    input_schema: Mapping[str, Any] | None = field(default=None, hash=False)
    execute: ToolFunction | None = None
    output_model: type[BaseModel] | None = None
    client: bool = False
    needs_approval: bool = False
    sub_agent: str | None = None
    timeout_seconds: float = DEFAULT_SUB_AGENT_TIMEOUT
    idempotent: bool = False

    def __post_init__(self) -> None:
        _check_name("Tool", self.name)
        if self.input_schema is None:
            _check_model(f"Tool {self.name!r}: input_model", self.input_model)
        elif self.input_model is not None:
            raise InvalidDefinition(f"Tool {self.name!r}: give input_model or input_schema.")
        elif (
            not isinstance(self.input_schema, Mapping) or self.input_schema.get("type") != "object"
        ):
            raise InvalidDefinition(
                f"Tool {self.name!r}: input_schema must be the JSON schema of an object."
            )
        else:
            object.__setattr__(self, "input_schema", copy.deepcopy(dict(self.input_schema)))
            object.__setattr__(self, "input_model", SchemaInput)
        if self.output_model is not None:
            _check_model(f"Tool {self.name!r}: output_model", self.output_model)
        if self.client or self.sub_agent is not None:
            if (
                self.execute is not None
                or self.needs_approval
                or self.idempotent
                or (self.client and self.sub_agent)
            ):
                raise InvalidDefinition(
                    f"Tool {self.name!r}: a client or sub-agent tool has no execute, "
                    "needs no approval and is not idempotent (it does not run here)."
                )
        elif not callable(self.execute):
            raise InvalidDefinition(f"Tool {self.name!r}: execute must be callable.")
        if self.timeout_seconds <= 0:
            raise InvalidDefinition(f"Tool {self.name!r}: timeout_seconds must be positive.")

    @property
    def suspends(self) -> bool:
        """Return whether a call of it suspends the run, until a person acts or a child ends."""
        return self.client or self.needs_approval or self.sub_agent is not None

    def json_schema(self) -> dict[str, Any]:
        """Return the JSON schema of the tool's input, as sent to the model."""
        if self.input_schema is not None:
            return copy.deepcopy(dict(self.input_schema))
        return copy.deepcopy(_model_schema(self.input_model))

    def parse_input(self, arguments: Mapping[str, Any]) -> BaseModel:
        """Return the validated input; raise `ToolInputInvalid` naming the problems."""
        try:
            return self.input_model.model_validate(arguments)
        except ValidationError as error:
            raise ToolInputInvalid(self.name, error) from None

    def run(self, arguments: Mapping[str, Any], ctx: ToolContext) -> Any:
        """Validate the arguments, run the tool, and return its result in JSON form.

        Call it from sync code: the executor calls it in a worker thread of its own. An async
        `execute` runs to completion through `async_to_sync`, so the `sync_to_async` calls it
        makes (the ORM, say) run in that same thread, not in a thread shared by every call.
        Raise `ToolInputInvalid` for bad arguments and `ToolResultInvalid` for a bad result;
        whatever `execute` raises propagates.
        """
        result = self.execute(self.parse_input(arguments), ctx)
        if inspect.isawaitable(result):
            result = async_to_sync(_awaited)(result)
        return self._json_result(result)

    def _json_result(self, result: Any) -> Any:
        if self.output_model is not None and not isinstance(result, self.output_model):
            try:
                result = self.output_model.model_validate(result)
            except ValidationError as error:
                summary = "; ".join(
                    f"{p['location'] or 'result'}: {p['problem']}" for p in _problems(error)
                )
                raise ToolResultInvalid(f"Tool {self.name!r} returned {summary}") from None
        try:
            return json_copy(result, f"The result of tool {self.name!r}")
        except ValueError as error:
            raise ToolResultInvalid(str(error)) from None


@dataclass(frozen=True, kw_only=True)
class Agent:
    """An agent: its prompt, tools, optional output schema, initial state and limits.

    `system_prompt` is text or a function of the custom state; `initial_state` is a dict or a
    function returning one (without one the agent has no state, `None`, until one is set);
    `state_sync` says how clients share the state (`agents_app.definitions.state_sync`); `llm` is
    free-form adapter configuration (model, temperature, ...). With `persistent_agents` (agent
    types), the agent also gets the companion tools that spawn, message, watch and stop
    persistent children of those types (`agents_app.subagents.companions`). With `memory`, it gets
    context blocks, their tools and compaction (`agents_app.definitions.memory`). With
    `mcp_servers`, it gets the tools of those MCP servers; with `mcp_session_servers`, each of its
    sessions may add servers of its own while it lives (`agents_app.mcp`).
    """

    name: str
    description: str = ""
    system_prompt: str | Callable[[dict[str, Any]], str] = ""
    tools: list[Tool] = field(default_factory=list)
    output_schema: type[BaseModel] | None = None
    initial_state: dict[str, Any] | Callable[[], dict[str, Any]] | None = None
    max_steps: int = 10
    llm: dict[str, Any] = field(default_factory=dict)
    hooks: AgentHooks | None = None
    persistent_agents: tuple[str, ...] = ()
    memory: AgentMemory | None = None
    state_sync: StateSync = field(default_factory=StateSync)
    mcp_servers: Sequence[McpServer] = ()
    mcp_session_servers: bool = False
    _output_tool: Tool | None = field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        _check_name("Agent", self.name)
        where = f"Agent {self.name!r}"
        if isinstance(self.max_steps, bool) or not isinstance(self.max_steps, int):
            raise InvalidDefinition(f"{where}: max_steps must be an integer.")
        if self.max_steps < 1:
            raise InvalidDefinition(f"{where}: max_steps must be at least 1.")
        if not isinstance(self.system_prompt, str) and not callable(self.system_prompt):
            raise InvalidDefinition(f"{where}: system_prompt must be text or a function.")
        if not isinstance(self.llm, Mapping):
            raise InvalidDefinition(f"{where}: llm must be a dict.")
        if self.hooks is not None and not isinstance(self.hooks, AgentHooks):
            raise InvalidDefinition(f"{where}: hooks must be an AgentHooks.")
        if self.memory is not None and not isinstance(self.memory, AgentMemory):
            raise InvalidDefinition(f"{where}: memory must be an AgentMemory.")
        if not isinstance(self.state_sync, StateSync):
            raise InvalidDefinition(f"{where}: state_sync must be a StateSync.")
        if self.initial_state is not None and not callable(self.initial_state):
            if not isinstance(self.initial_state, Mapping):
                raise InvalidDefinition(f"{where}: initial_state must be a dict or a function.")
            try:
                storable_json_copy(self.initial_state, f"{where}: initial_state")
            except ValueError as error:
                raise InvalidDefinition(str(error)) from None
        self._check_tools(where)
        self._check_mcp_servers(where)
        if self.output_schema is not None:
            _check_model(f"{where}: output_schema", self.output_schema)
            object.__setattr__(self, "_output_tool", output_tool(self.output_schema))
        object.__setattr__(self, "tools", list(self.tools))
        object.__setattr__(self, "persistent_agents", tuple(self.persistent_agents))

    def _check_tools(self, where: str) -> None:
        for tool in self.tools:
            if not isinstance(tool, Tool):
                raise InvalidDefinition(f"{where}: {tool!r} is not a Tool.")
            if tool.name == OUTPUT_TOOL_NAME:
                raise InvalidDefinition(
                    f"{where}: the tool name {OUTPUT_TOOL_NAME!r} is reserved for the output "
                    "tool; give the agent an output_schema instead."
                )
        names = [tool.name for tool in self.tools]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise InvalidDefinition(f"{where} has several tools named {', '.join(duplicates)}.")

    def _check_mcp_servers(self, where: str) -> None:
        if isinstance(self.mcp_servers, McpServer | str | Mapping):
            raise InvalidDefinition(f"{where}: mcp_servers must be a list of McpServer.")
        servers = tuple(self.mcp_servers)
        for server in servers:
            if not isinstance(server, McpServer):
                raise InvalidDefinition(f"{where}: {server!r} is not an McpServer.")
        names = [server.name for server in servers]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise InvalidDefinition(
                f"{where} has several MCP servers named {', '.join(duplicates)}."
            )
        object.__setattr__(self, "mcp_servers", servers)

    def render_system_prompt(self, state: Mapping[str, Any] | None) -> str:
        """Return the system prompt for the agent's custom state."""
        prompt = self.system_prompt
        if not callable(prompt):
            return prompt
        rendered = prompt(copy.deepcopy(dict(state or {})))
        if not isinstance(rendered, str):
            raise TypeError(
                f"Agent {self.name!r}: system_prompt returned {type(rendered).__name__}, not text."
            )
        return rendered

    def make_initial_state(self) -> dict[str, Any] | None:
        """Return a fresh copy of the initial custom state, in JSON form; `None` without one."""
        if self.initial_state is None:
            return None
        initial = self.initial_state() if callable(self.initial_state) else self.initial_state
        if not isinstance(initial, Mapping):
            raise TypeError(
                f"Agent {self.name!r}: initial_state returned {type(initial).__name__}, not a dict."
            )
        return storable_json_copy(dict(initial), f"Agent {self.name!r}: initial_state")

    def all_tools(self) -> list[Tool]:
        """Return the agent's tools and, with an output schema, its output tool last."""
        if self._output_tool is None:
            return list(self.tools)
        return [*self.tools, self._output_tool]

    def parse_output(self, arguments: Mapping[str, Any]) -> Any:
        """Return the structured output an output-tool call gives, in JSON form.

        Raise `ToolInputInvalid` naming the problems if it does not fit the output schema.
        """
        if self._output_tool is None:
            raise ValueError(f"Agent {self.name!r} has no output schema.")
        return self._output_tool.parse_input(arguments).model_dump(mode="json")


def sub_agent_tool(
    agent_type: str,
    input_model: type[BaseModel],
    *,
    name: str | None = None,
    description: str = "",
    timeout_seconds: float = DEFAULT_SUB_AGENT_TIMEOUT,
) -> Tool:
    """Return a tool that runs the registered agent `agent_type` as a child session.

    The call's arguments, as JSON, are the child's first message; the child's output is the
    call's result. A child that fails or outlives `timeout_seconds` fails the call, not the run.
    """
    return Tool(
        name=name or agent_type,
        description=description or f"Ask the {agent_type} agent.",
        input_model=input_model,
        sub_agent=agent_type,
        timeout_seconds=timeout_seconds,
    )


def output_tool(schema: type[BaseModel]) -> Tool:
    """Return the tool an agent with `schema` finishes through; the executor handles its call."""
    return Tool(
        name=OUTPUT_TOOL_NAME,
        description="Give the final answer in the required structure; this ends the run.",
        input_model=schema,
        execute=_handled_by_the_executor,
    )


def _handled_by_the_executor(output: BaseModel, ctx: ToolContext) -> Any:
    raise RuntimeError(
        f"{OUTPUT_TOOL_NAME} is not run: the executor passes its arguments to "
        "Agent.parse_output and finishes the run."
    )


@functools.cache
def _model_schema(model: type[BaseModel]) -> dict[str, Any]:
    """Return the JSON schema of a tool's input model, built once: every step sends it."""
    return model.model_json_schema()


def _check_name(kind: str, name: Any) -> None:
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise InvalidDefinition(
            f"{kind} name {name!r} must be 1 to 64 letters, digits, underscores or hyphens."
        )


def _check_model(what: str, model: Any) -> None:
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise InvalidDefinition(f"{what} must be a pydantic model class, not {model!r}.")


def _problems(error: ValidationError) -> list[dict[str, str]]:
    return [
        {"location": ".".join(map(str, item["loc"])), "problem": item["msg"]}
        for item in error.errors(include_url=False)
    ]


async def _awaited(awaitable: Any) -> Any:
    return await awaitable
