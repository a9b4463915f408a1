"""A tool's state draft: reads see its writes, writes become merge ops, nothing is mutated."""

from agents_app.state import StateDraft
from sessions_app.stores.rules import apply_merge_ops
from sessions_app.stores.types import AppendOp, DeleteOp, ReplaceOp, StepWrites


def test_writes_become_ops_in_order_and_reads_see_them():
    committed = {"count": 1, "notes": ["a"], "old": True}
    draft = StateDraft(committed)

    draft["count"] = draft["count"] + 1
    draft.append("notes", "b", "c")
    del draft["old"]
    draft.set("fresh", {"nested": [1]})

    assert draft.ops() == [
        ReplaceOp(key="count", value=2),
        AppendOp(key="notes", items=["b", "c"]),
        DeleteOp(key="old"),
        ReplaceOp(key="fresh", value={"nested": [1]}),
    ]
    assert dict(draft) == {"count": 2, "notes": ["a", "b", "c"], "fresh": {"nested": [1]}}
    assert "old" not in draft
    assert committed == {"count": 1, "notes": ["a"], "old": True}


def test_values_read_or_written_are_copies():
    value = {"nested": [1]}
    draft = StateDraft({})
    draft["key"] = value
    value["nested"].append(2)
    draft["key"]["nested"].append(3)

    assert draft["key"] == {"nested": [1]}


def test_two_drafts_appending_in_parallel_both_land_at_commit():
    committed = {"notes": []}
    first, second = StateDraft(committed), StateDraft(committed)
    first.append("notes", "from first")
    second.append("notes", "from second")

    state, warnings = apply_merge_ops(committed, StepWrites(ops=first.ops() + second.ops()))

    assert state == {"notes": ["from first", "from second"]}
    assert warnings == []
