"""Persistent sub-agents and their companion tools (reference 001 "Persistent Sub-Agents").

An agent with `persistent_agents` gets six tools: `companion__spawnAgent`,
`companion__sendMessage`, `companion__listChildren`, `companion__getChildStatus`,
`companion__waitForResult` and `companion__terminateChild`. A persistent child is the session
`{parent}-child-{name}`, recorded as a persistent `SubSessionRef` with its name; spawning a
finished child again, or sending it a message, starts a new run on the same session, so it
remembers what it was told before.

A blocking spawn, and a wait on a child that is running, suspend the parent as a sub-agent call
does (the executor holds them; `subagents` brings the child's outcome back). Every other call
runs as an ordinary tool and answers at once.
"""

import uuid
from typing import Any

from django.db import transaction
from pydantic import BaseModel, ConfigDict, Field

from agents_app.definitions.agent import Agent, Tool, ToolContext
from agents_app.definitions.inputs import input_messages
from agents_app.definitions.registry import AgentFactoryContext, get_registry
from agents_app.llm.base import ToolCall
from agents_app.runs import control, launch
from agents_app.subagents.children import ENDED, child_outcome, create_child
from sessions_app.stores import get_session_store
from sessions_app.stores.types import (
    SessionState,
    SessionStatus,
    SubSessionMode,
    SubSessionRef,
    SubSessionRefUpdate,
)

SPAWN = "companion__spawnAgent"
SEND = "companion__sendMessage"
LIST = "companion__listChildren"
STATUS = "companion__getChildStatus"
WAIT = "companion__waitForResult"
TERMINATE = "companion__terminateChild"
NAME = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$", description="The child's name, unique per parent.")


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SpawnInput(_Input):
    agentType: str = Field(description="The agent type of the child.")
    name: str = NAME
    message: str = Field(description="What the child is asked.")
    blocking: bool = Field(True, description="Wait for the child's answer (or go on at once).")


class MessageInput(_Input):
    name: str = NAME
    message: str


class NameInput(_Input):
    name: str = NAME


class NoInput(_Input):
    pass


class ChildUnavailable(Exception):
    """The child cannot take a new run now; the message says why."""


def persistent_child_id(parent_session_id: str, name: str) -> str:
    """Return the session id of the parent's persistent child `name`."""
    return f"{parent_session_id}-child-{name}"


def companion_tools(agent: Agent) -> list[Tool]:
    """Return the companion tools of an agent with persistent children; none otherwise."""
    if not agent.persistent_agents:
        return []
    kinds = ", ".join(agent.persistent_agents)
    return [
        Tool(
            name=SPAWN,
            description=f"Start a persistent child agent ({kinds}), or ask a finished one again.",
            input_model=SpawnInput,
            execute=_spawn,
        ),
        Tool(
            name=SEND,
            description="Send a finished child a follow-up message; it runs again.",
            input_model=MessageInput,
            execute=_send,
        ),
        Tool(
            name=LIST,
            description="List your persistent children.",
            input_model=NoInput,
            execute=_list,
        ),
        Tool(
            name=STATUS,
            description="Get a child's status.",
            input_model=NameInput,
            execute=_status,
        ),
        Tool(
            name=WAIT,
            description="Wait until a child has finished; get its result.",
            input_model=NameInput,
            execute=_wait,
        ),
        Tool(
            name=TERMINATE,
            description="Stop a child for good.",
            input_model=NameInput,
            execute=_terminate,
        ),
    ]


def holds(call: ToolCall, parent: SessionState, agent: Agent) -> bool:
    """Return whether a companion call suspends the parent until a child ends.

    So do a blocking spawn that can start, and a wait on a running child.
    """
    if call.name == SPAWN:
        spawn = SpawnInput.model_validate(call.arguments)
        return spawn.blocking and _refusal(parent, agent, spawn.agentType, spawn.name) is None
    if call.name == WAIT:
        child = _child(parent.session_id, NameInput.model_validate(call.arguments).name)
        return child is not None and child.status not in ENDED
    return False


def awaited_child(call: ToolCall, parent: SessionState) -> SessionState:
    """Return the child a held companion call waits for, starting it first for a spawn."""
    if call.name == SPAWN:
        spawn = SpawnInput.model_validate(call.arguments)
        return start_child(parent, spawn.agentType, spawn.name, spawn.message)
    return _child(parent.session_id, NameInput.model_validate(call.arguments).name)


@transaction.atomic
def start_child(parent: SessionState, agent_type: str, name: str, message: str) -> SessionState:
    """Start a run of the persistent child `name`, creating it the first time; return it.

    Call it inside a transaction. Raises `ChildUnavailable` if it is running or terminated.
    """
    store = get_session_store()
    child_id = persistent_child_id(parent.session_id, name)
    run_id = uuid.uuid4().hex
    child = store.load_state(child_id)
    if child is None:
        ref = SubSessionRef(
            sub_session_id=child_id,
            agent_type=agent_type,
            parent_tool_call_id="",
            mode=SubSessionMode.PERSISTENT,
            name=name,
        )
        child = create_child(parent, ref, run_id)
    else:
        if child.aborted:
            raise ChildUnavailable(f"The child {name!r} was terminated.")
        if child.status not in ENDED:
            raise ChildUnavailable(f"The child {name!r} is still running; wait for it with {WAIT}.")
        store.update_sub_session_ref(
            parent.session_id,
            SubSessionRefUpdate(sub_session_id=child_id, status=SessionStatus.ACTIVE),
        )
    launch.begin_run(child, run_id, input_messages(message))
    return store.load_state(child_id)


def _refusal(parent: SessionState, agent: Agent, agent_type: str, name: str) -> str | None:
    """Return why spawning `name` as `agent_type` cannot start now, or None if it can."""
    if agent_type not in agent.persistent_agents:
        return f"{agent_type!r} is not an agent type you may spawn; yours are: " + ", ".join(
            agent.persistent_agents
        )
    child = _child(parent.session_id, name)
    if child is None:
        return None if get_registry().has(agent_type) else f"No agent type {agent_type!r}."
    if child.agent_type != agent_type:
        return f"The child {name!r} is a {child.agent_type}, not a {agent_type}."
    if child.aborted:
        return f"The child {name!r} was terminated."
    if child.status not in ENDED:
        return f"The child {name!r} is still running; wait for it with {WAIT}."
    return None


def _child(parent_session_id: str, name: str) -> SessionState | None:
    return get_session_store().load_state(persistent_child_id(parent_session_id, name))


def _parent(ctx: ToolContext) -> SessionState:
    return get_session_store().load_state(ctx.session_id)


def _spawn(spawn: SpawnInput, ctx: ToolContext) -> dict[str, Any]:
    """Start a child without waiting; a blocking spawn reaches here only when refused."""
    parent = _parent(ctx)
    agent = get_registry().resolve(
        parent.agent_type, AgentFactoryContext(session_id=parent.session_id, run_id=ctx.run_id)
    )
    if problem := _refusal(parent, agent, spawn.agentType, spawn.name):
        return {"error": problem}
    child = start_child(parent, spawn.agentType, spawn.name, spawn.message)
    return {"name": spawn.name, "sessionId": child.session_id, "status": "running"}


def _send(message: MessageInput, ctx: ToolContext) -> dict[str, Any]:
    parent = _parent(ctx)
    child = _child(parent.session_id, message.name)
    if child is None:
        return {"error": f"No child named {message.name!r}; spawn it with {SPAWN}."}
    try:
        start_child(parent, child.agent_type, message.name, message.message)
    except ChildUnavailable as problem:
        return {"error": str(problem)}
    return {"name": message.name, "sessionId": child.session_id, "status": "running"}


def _list(_: NoInput, ctx: ToolContext) -> dict[str, Any]:
    store = get_session_store()
    children = []
    for ref in store.get_sub_session_refs(ctx.session_id):
        if ref.mode == SubSessionMode.PERSISTENT:
            child = store.load_state(ref.sub_session_id)
            children.append(
                {
                    "name": ref.name,
                    "agentType": ref.agent_type,
                    "sessionId": ref.sub_session_id,
                    "status": child.status if child else "deleted",
                }
            )
    return {"children": children}


def _status(child_name: NameInput, ctx: ToolContext) -> dict[str, Any]:
    child = _child(ctx.session_id, child_name.name)
    if child is None:
        return {"error": f"No child named {child_name.name!r}."}
    return {
        "name": child_name.name,
        "sessionId": child.session_id,
        "status": child.status,
        "output": child.output,
        "error": child.error,
    }


def _wait(child_name: NameInput, ctx: ToolContext) -> Any:
    """Answer a wait on a child that is not running: its last result, at once."""
    child = _child(ctx.session_id, child_name.name)
    if child is None:
        return {"error": f"No child named {child_name.name!r}."}
    result, _ = child_outcome(child)
    return result


def _terminate(child_name: NameInput, ctx: ToolContext) -> dict[str, Any]:
    child = _child(ctx.session_id, child_name.name)
    if child is None:
        return {"error": f"No child named {child_name.name!r}."}
    if child.status in ENDED:
        return {"name": child_name.name, "terminated": False, "status": child.status}
    control.abort_session(child.session_id, "Terminated by its parent.")
    return {"name": child_name.name, "terminated": True}
