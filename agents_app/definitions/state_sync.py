"""How an agent shares its live state with clients (reference 004): the definition's part.

An agent's state is its session's custom state: the state its tools write, one source of truth.
`Agent(state_sync=StateSync(...))` says who may write it and what runs around a write:

- `validate_state_change(next_state, source)`: sync; raising rejects the write, nothing is
  stored (a client is told "State update rejected"; the reason is only logged);
- `on_state_update(state, source)`: after the write is stored and broadcast; best effort, its
  errors are logged and never undo the write;
- `readonly_connection(connection)`: whether a connection may only watch;
- `allow_anonymous`: whether a client that is not signed in may connect;
- `callables`: the functions clients may call over the WebSocket (`rpc`), each marked with
  `@callable_method`. A call gets an `RpcContext` and the call's arguments; a streaming method
  is a generator whose items are sent as they come.

`source` is `SERVER` or the `Connection` that sent the state.
"""

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

SERVER: Literal["server"] = "server"
CALLABLE_MARK = "_helix_callable"


@dataclass(frozen=True, kw_only=True)
class Connection:
    """A client's WebSocket connection to an agent."""

    id: str
    user_id: int | None
    readonly: bool = False


StateSource = Literal["server"] | Connection


class RpcContext(Protocol):
    """What a callable method gets beside its arguments."""

    @property
    def session_id(self) -> str: ...

    @property
    def connection(self) -> Connection: ...

    @property
    def state(self) -> dict[str, Any] | None:
        """Return the agent's state as stored now."""

    def set_state(self, state: dict[str, Any] | None) -> None:
        """Write the agent's state as the server: validated, stored and broadcast to all."""

    async def astate(self) -> dict[str, Any] | None:
        """Return the agent's state as stored now, from an async method."""

    async def aset_state(self, state: dict[str, Any] | None) -> None:
        """Write the agent's state as `set_state` does, from an async method."""


def callable_method(function: Callable | None = None, *, streaming: bool = False):
    """Mark `function` as callable by clients (`rpc`); `streaming` for a generator's items."""

    def mark(target: Callable) -> Callable:
        if streaming and not (
            inspect.isgeneratorfunction(target) or inspect.isasyncgenfunction(target)
        ):
            raise TypeError(f"{target.__name__}: a streaming method must be a generator.")
        setattr(target, CALLABLE_MARK, {"streaming": streaming})
        return target

    return mark if function is None else mark(function)


def is_streaming(method: Callable) -> bool:
    """Return whether a callable method streams its result."""
    return getattr(method, CALLABLE_MARK)["streaming"]


@dataclass(frozen=True, kw_only=True)
class StateSync:
    """Who may write an agent's state over the WebSocket, and what runs around a write."""

    validate_state_change: Callable[[Any, StateSource], None] | None = None
    on_state_update: Callable[[Any, StateSource], None] | None = None
    readonly_connection: Callable[[Connection], bool] | None = None
    allow_anonymous: bool = False
    callables: Sequence[Callable] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        unmarked = [f for f in self.callables if not hasattr(f, CALLABLE_MARK)]
        if unmarked:
            names = ", ".join(getattr(f, "__name__", repr(f)) for f in unmarked)
            raise ValueError(
                f"StateSync: mark {names} with @callable_method to let clients call it."
            )
        object.__setattr__(self, "callables", tuple(self.callables))

    def method(self, name: str) -> Callable | None:
        """Return the callable method `name`, or None."""
        return next((f for f in self.callables if f.__name__ == name), None)
