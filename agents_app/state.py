"""The state draft a tool call writes through: reads see its own writes, writes become ops.

Each tool call of a step gets a draft of the custom state the step began with. Its writes are
recorded as merge ops (`sessions_app.stores.types`), staged per call, and applied at the step
commit, so parallel calls merge without losing each other's writes.
"""

import copy
from collections.abc import Iterator, Mapping
from typing import Any

from sessions_app.stores.rules import apply_merge_ops
from sessions_app.stores.types import AppendOp, DeleteOp, MergeOp, ReplaceOp, StepWrites

_MISSING = object()


class StateDraft(Mapping[str, Any]):
    """A custom state with pending writes; it never changes the dict it was given."""

    def __init__(self, state: Mapping[str, Any] | None) -> None:
        self._base = copy.deepcopy(dict(state or {}))
        self._ops: list[MergeOp] = []
        self._view = dict(self._base)

    def __getitem__(self, key: str) -> Any:
        return copy.deepcopy(self._view[key])

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

    def set(self, key: str, value: Any) -> None:
        """Set `key` to `value` (the last writer of a key wins)."""
        self._record(ReplaceOp(key=key, value=copy.deepcopy(value)))

    def append(self, key: str, *items: Any) -> None:
        """Append `items` to the list at `key` (appends of parallel calls all land)."""
        self._record(AppendOp(key=key, items=copy.deepcopy(list(items))))

    def delete(self, key: str) -> None:
        """Remove `key`."""
        self._record(DeleteOp(key=key))

    def ops(self) -> list[MergeOp]:
        """Return the writes so far, in order."""
        return list(self._ops)

    def _record(self, op: MergeOp) -> None:
        self._ops.append(op)
        self._view, _ = apply_merge_ops(self._base, StepWrites(ops=self._ops))
