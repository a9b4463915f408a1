"""The state draft a tool call writes through: reads see its own writes, writes become ops.

Each tool call of a step gets a draft of the custom state the step began with. Its writes are
recorded as merge ops (`sessions_app.stores.types`), staged per call as a `StagedToolChange`,
and applied at the step commit with `apply_merge_ops`, so parallel calls merge without losing
each other's writes: appends all land, and of two `set`s of one key the later call wins.
"""

import copy
import json
from collections.abc import Iterator, Mapping
from typing import Any

from pydantic_core import PydanticSerializationError, to_jsonable_python

from sessions_app.storable import storable, unstorable_character, unstorable_text
from sessions_app.stores.rules import apply_merge_ops
from sessions_app.stores.types import (
    AppendOp,
    DeleteOp,
    MergeOp,
    ReplaceOp,
    StagedToolChange,
    StepWrites,
)


def json_copy(value: Any, what: str) -> Any:
    """Return `value` in JSON form (pydantic models dumped), sharing nothing with it.

    Raise `ValueError` naming `what` when it has no JSON form; NaN and infinities count as
    none, since PostgreSQL refuses them.
    """
    try:
        converted = to_jsonable_python(value)
        json.dumps(converted, allow_nan=False)
    except (PydanticSerializationError, ValueError, TypeError) as error:
        raise ValueError(f"{what} must be JSON-serializable: {error}") from None
    return converted


def storable_json_copy(value: Any, what: str) -> Any:
    """Return `json_copy(value, what)`, refusing as well what no database stores.

    For state a developer's code gives (an agent's initial state, a state set from server code),
    where a tool's writes are stored with the character replaced (`sessions_app.storable`):
    raise `ValueError` naming `what` when it holds a NUL character, which PostgreSQL refuses
    and SQLite stores.
    """
    converted = json_copy(value, what)
    if kind := unstorable_character(converted):
        raise ValueError(f"{what} holds {unstorable_text(kind)}, which no database stores.")
    return converted


class StateDraft(Mapping[str, Any]):
    """A custom state with pending writes; it never changes the dict it was given.

    Read it like a dict (`draft[key]`, `key in draft`, `draft.get(key)`); every value read is
    a copy, so changing it changes nothing. Write with `draft[key] = value`, `set`, `append`,
    `delete` or `del draft[key]`; values are stored in their JSON form, as every backend stores
    them (`sessions_app.storable`).
    """

    def __init__(self, state: Mapping[str, Any] | None = None) -> None:
        self._base: dict[str, Any] = copy.deepcopy(dict(state or {}))
        self._ops: list[MergeOp] = []
        self._view: dict[str, Any] = dict(self._base)

    def __getitem__(self, key: str) -> Any:
        return copy.deepcopy(self._view[key])

    def __contains__(self, key: object) -> bool:
        return key in self._view

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._view))

    def __len__(self) -> int:
        return len(self._view)

    def __setitem__(self, key: str, value: Any) -> None:
        self.set(key, value)

    def __delitem__(self, key: str) -> None:
        if key not in self._view:
            raise KeyError(key)
        self.delete(key)

    def __repr__(self) -> str:
        return f"<StateDraft {self._view!r} ops={len(self._ops)}>"

    def set(self, key: str, value: Any) -> None:
        """Set `key` to `value`; of parallel calls setting one key, the later call wins."""
        value = storable(json_copy(value, f"State key {key!r}"))
        self._record(ReplaceOp(key=_checked(key), value=value))

    def append(self, key: str, *items: Any) -> None:
        """Append `items` to the list at `key`, creating it; parallel appends all land.

        Raise `TypeError` if `key` holds something other than a list.
        """
        current = self._view.get(_checked(key))
        if current is not None and not isinstance(current, list):
            raise TypeError(
                f"Cannot append to state key {key!r}: it holds {type(current).__name__}, "
                "not a list."
            )
        appended = storable(json_copy(list(items), f"State key {key!r}"))
        self._record(AppendOp(key=key, items=appended))

    def delete(self, key: str) -> None:
        """Remove `key` (nothing happens at commit if it is absent by then)."""
        self._record(DeleteOp(key=_checked(key)))

    def replay(self, ops: list[MergeOp]) -> None:
        """Write `ops` as a call did before (its outcome, replayed after its worker died)."""
        for op in ops:
            self._record(op)

    @property
    def written(self) -> bool:
        """Return whether anything was written through the draft."""
        return bool(self._ops)

    def ops(self) -> list[MergeOp]:
        """Return the writes so far, in order, as merge ops sharing nothing with the draft."""
        return copy.deepcopy(self._ops)

    def writes(self) -> StepWrites:
        """Return the writes as the `StepWrites` that `apply_merge_ops` takes."""
        return StepWrites(ops=self.ops())

    def staged_change(self, tool_call_id: str) -> StagedToolChange:
        """Return the writes as the staged change of the tool call `tool_call_id`.

        The change carries merge ops only: they are what the step commit applies, and the
        store's size limit counts every byte staged.
        """
        return StagedToolChange(tool_call_id=tool_call_id, merge_ops=self.ops())

    def _record(self, op: MergeOp) -> None:
        self._ops.append(op)
        self._view, _ = apply_merge_ops(self._view, StepWrites(ops=[op]))


def _checked(key: Any) -> str:
    if not isinstance(key, str):
        raise TypeError(f"State keys are strings, not {type(key).__name__}.")
    return key
