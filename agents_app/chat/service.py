"""The unified chat (reference 001 `/chat` routes): one entry that starts, continues, resumes or
attaches to a session's run, for clients such as the AI SDK's `useChat`.

A chat is a session whose id is the chat id. Sending to it:
- fresh: no such session yet: it is created for the agent type asked for, and a run starts;
- continue: the session is idle: a run starts with the last message;
- resume: asked for (`resume`) on an interrupted session: it resumes;
- attach: a run is executing: nothing starts, and the client follows that run.

Regenerating answers the last user message again on a branch of its own (`agent_regenerate`).
"""

import time
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser

from agents_app import conf
from agents_app.errors import InvalidChatMessage, RunNotActive
from agents_app.runs import control
from agents_app.runs.services import agent_interrupt, agent_regenerate, agent_resume, agent_start
from sessions_app.selectors import existing_session_for_user, session_for_user
from sessions_app.stores import get_session_store


@dataclass(frozen=True, kw_only=True)
class ChatRun:
    """The run a chat client follows: its stream's chunks after `from_sequence` are the run's."""

    session_id: str
    stream_id: str
    run_id: str
    from_sequence: int


def chat_send(
    *,
    user: AbstractBaseUser,
    chat_id: str,
    messages: list[dict[str, Any]],
    agent_type: str | None = None,
    resume: bool = False,
) -> ChatRun:
    """Start, continue, resume or attach to the chat's run; return the run to follow.

    `messages` are the client's UI messages; the last one is the new user message.
    """
    state = existing_session_for_user(session_id=chat_id, user=user)
    if state is not None and control.is_running(chat_id):
        return _current(chat_id)
    if state is not None and resume:
        agent_resume(user=user, session_id=chat_id)
        return _current(chat_id)
    agent_type = agent_type or (state.agent_type if state is not None else None)
    if agent_type is None:
        raise InvalidChatMessage("agentType is needed to start a new chat.")
    try:
        agent_start(
            user=user,
            agent_type=agent_type,
            session_id=chat_id,
            message=[_user_input(messages)],
        )
    except RunNotActive:
        if not control.is_running(chat_id):
            raise
    return _current(chat_id)  # Ours, or one that another request started just before.


def chat_regenerate(*, user: AbstractBaseUser, chat_id: str) -> ChatRun:
    """Answer the chat's last user message again, on a new branch; attach if a run executes."""
    session_for_user(session_id=chat_id, user=user)
    if not control.is_running(chat_id):
        agent_regenerate(user=user, session_id=chat_id)
    return _current(chat_id)


def chat_following(*, user: AbstractBaseUser, chat_id: str) -> ChatRun | None:
    """Return the chat's executing run to re-attach to, or `None` when none is executing."""
    session_for_user(session_id=chat_id, user=user)
    return _current(chat_id) if control.is_running(chat_id) else None


def chat_interrupt(*, user: AbstractBaseUser, chat_id: str, reason: str | None = None) -> bool:
    """Raise the chat's durable interrupt flag; return whether its run stopped in time.

    It waits `HELIX["INTERRUPT_OBSERVATION_SECONDS"]` at most for the run to observe the flag.
    """
    agent_interrupt(user=user, session_id=chat_id, reason=reason)
    deadline = time.monotonic() + conf.interrupt_observation_seconds()
    while control.is_running(chat_id):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def _current(session_id: str) -> ChatRun:
    state = get_session_store().load_state(session_id)
    run = get_session_store().get_current_run(session_id)
    return ChatRun(
        session_id=session_id,
        stream_id=state.stream_id,
        run_id=run.run_id,
        # After a suspension, the run's continuation; else the run from its first chunk.
        from_sequence=run.metadata.get("resumedFromSequence", run.metadata.get("fromSequence", 0)),
    )


def _user_input(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """Return the last UI message, a user's, as run input (in the shape
    `agents_app.definitions.inputs` checks)."""
    if not messages or messages[-1].get("role") != "user":
        raise InvalidChatMessage("The last message must be the user's new message.")
    parts = messages[-1].get("parts")
    if not isinstance(parts, list) or not all(isinstance(part, dict) for part in parts):
        raise InvalidChatMessage("The last message must have a list of parts.")
    text = "".join(part.get("text", "") for part in parts if part.get("type") == "text")
    files = [
        {
            "data": part.get("url"),
            "mediaType": part.get("mediaType"),
            "filename": part.get("filename"),
        }
        for part in parts
        if part.get("type") == "file"
    ]
    return {"role": "user", "content": text, "files": files}
