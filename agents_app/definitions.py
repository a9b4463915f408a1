"""Agent and tool definitions (reference 001 `defineAgent` / `defineTool`), in Python.

A tool's input is a pydantic model whose JSON schema is what the model sees. An agent with an
output schema finishes only through its output tool, `final_output`, whose input is that
schema; an agent without one finishes when a reply asks for no tool.
"""

import asyncio
import copy
import inspect
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel, ValidationError

from agents_app.hooks import AgentHooks
from agents_app.state import StateDraft
from sessions_app.errors import HelixError

OUTPUT_TOOL_NAME = "final_output"
_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


class InvalidDefinition(ValueError):
    """An agent or tool definition breaks a rule; raised when it is defined."""


class ToolInputInvalid(HelixError):
    code = "invalid-tool-input"
    http_status = 400

    def __init__(self, tool_name: str, error: ValidationError) -> None:
        problems = [
            {"location": ".".join(map(str, item["loc"])), "problem": item["msg"]}
            for item in error.errors(include_url=False)
        ]
        summary = "; ".join(f"{p['location'] or 'input'}: {p['problem']}" for p in problems)
        super().__init__(f"Invalid input for {tool_name}: {summary}", problems=problems)


class ToolContext(Protocol):
    """What a tool's `execute` receives beside its input (the executor implements it)."""

    session_id: str
    run_id: str
    agent_type: str
    step: int
    state: StateDraft

    def emit(self, data: Any, *, name: str | None = None) -> None:
        """Write a custom chunk to the session's stream."""

    def record_usage(self, metric_type: str, name: str, value: float) -> None:
        """Record a custom usage metric with the step."""


def _check_name(kind: str, name: str) -> None:
    if not _NAME.match(name):
        raise InvalidDefinition(
            f"{kind} name {name!r} must be 1-64 letters, digits, underscores or hyphens."
        )


@dataclass(frozen=True, kw_only=True)
class Tool:
    """A tool the model may call; `execute(input, ctx)` may be sync or async."""

    name: str
    description: str
    input_model: type[BaseModel]
    execute: Callable[[Any, ToolContext], Any]

    def __post_init__(self) -> None:
        _check_name("Tool", self.name)

    def json_schema(self) -> dict[str, Any]:
        """Return the JSON schema of the tool's input, as sent to the model."""
        return self.input_model.model_json_schema()

    def parse_input(self, arguments: Mapping[str, Any]) -> BaseModel:
        """Return the validated input; raise `ToolInputInvalid` naming the problems."""
        try:
            return self.input_model.model_validate(arguments)
        except ValidationError as error:
            raise ToolInputInvalid(self.name, error) from None

    def run(self, arguments: Mapping[str, Any], ctx: ToolContext) -> Any:
        """Validate the arguments and run the tool; return its result in JSON-able form.

        Call it from a thread without a running event loop: an async tool runs to completion
        in a loop of its own.
        """
        result = self.execute(self.parse_input(arguments), ctx)
        if inspect.isawaitable(result):
            result = asyncio.run(_awaited(result))
        return result.model_dump(mode="json") if isinstance(result, BaseModel) else result


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


@dataclass(frozen=True, kw_only=True)
class Agent:
    """An agent: its prompt, tools, optional output schema, initial state and limits."""

    name: str
    description: str = ""
    system_prompt: str | Callable[[dict[str, Any]], str] = ""
    tools: list[Tool] = field(default_factory=list)
    output_schema: type[BaseModel] | None = None
    initial_state: dict[str, Any] | Callable[[], dict[str, Any]] = field(default_factory=dict)
    max_steps: int = 10
    llm: dict[str, Any] = field(default_factory=dict)
    hooks: AgentHooks | None = None

    def __post_init__(self) -> None:
        _check_name("Agent", self.name)
        if self.max_steps < 1:
            raise InvalidDefinition(f"Agent {self.name!r}: max_steps must be at least 1.")
        names = [tool.name for tool in self.all_tools()]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise InvalidDefinition(f"Agent {self.name!r} has tools named alike: {duplicates}.")

    def render_system_prompt(self, state: dict[str, Any]) -> str:
        """Return the system prompt for the agent's custom state."""
        prompt = self.system_prompt
        return prompt(copy.deepcopy(state)) if callable(prompt) else prompt

    def make_initial_state(self) -> dict[str, Any]:
        """Return a fresh copy of the initial custom state."""
        initial = self.initial_state
        return copy.deepcopy(initial() if callable(initial) else initial)

    def all_tools(self) -> list[Tool]:
        """Return the agent's tools and, with an output schema, its output tool."""
        if self.output_schema is None:
            return list(self.tools)
        return [*self.tools, output_tool(self.output_schema)]

    def parse_output(self, arguments: Mapping[str, Any]) -> Any:
        """Return the structured output in JSON form; raise `ToolInputInvalid` if it is not."""
        return output_tool(self.output_schema).parse_input(arguments).model_dump(mode="json")


def output_tool(schema: type[BaseModel]) -> Tool:
    """Return the tool an agent with `schema` finishes through; the executor handles its call."""
    return Tool(
        name=OUTPUT_TOOL_NAME,
        description="Give the final answer in the required structure; this ends the run.",
        input_model=schema,
        execute=_handled_by_the_executor,
    )


def _handled_by_the_executor(output: BaseModel, ctx: ToolContext) -> Any:
    raise RuntimeError(f"The executor handles {OUTPUT_TOOL_NAME} calls itself.")
