"""A tool's state draft: reads see its writes, writes become merge ops, nothing is mutated."""

import copy
import json
import math

import pytest
from pydantic import BaseModel

from agents_app.definitions.state import StateDraft
from sessions_app.stores.rules import apply_merge_ops, check_staged_sizes
from sessions_app.stores.types import (
    AppendOp,
    DeleteOp,
    ReplaceOp,
    StagedToolChange,
    StepWrites,
    merge_op_from_json,
    merge_op_to_json,
)


def test_writes_become_ops_in_order_and_reads_see_them():
    committed = {"count": 1, "notes": ["a"], "old": True}
    draft = StateDraft(committed)

    draft["count"] = draft["count"] + 1
    draft.append("notes", "b", "c")
    del draft["old"]
    draft.set("fresh", {"nested": [1]})
    draft.append("log", "started")
    draft.delete("never-there")

    assert draft.ops() == [
        ReplaceOp(key="count", value=2),
        AppendOp(key="notes", items=["b", "c"]),
        DeleteOp(key="old"),
        ReplaceOp(key="fresh", value={"nested": [1]}),
        AppendOp(key="log", items=["started"]),
        DeleteOp(key="never-there"),
    ]
    assert dict(draft) == {
        "count": 2,
        "notes": ["a", "b", "c"],
        "fresh": {"nested": [1]},
        "log": ["started"],
    }
    assert "old" not in draft
    assert "fresh" in draft
    assert draft.get("old", "gone") == "gone"
    assert len(draft) == 4
    assert sorted(draft) == ["count", "fresh", "log", "notes"]


def test_a_fresh_draft_reads_the_committed_state_and_has_no_ops():
    draft = StateDraft({"count": 3})

    assert draft["count"] == 3
    assert draft.ops() == []
    assert dict(StateDraft(None)) == {}
    with pytest.raises(KeyError):
        draft["missing"]
    with pytest.raises(KeyError):
        del draft["missing"]
    assert draft.ops() == []


def test_the_committed_state_is_never_mutated():
    committed = {"notes": ["a"], "profile": {"tags": ["x"]}, "old": 1}
    before = copy.deepcopy(committed)
    draft = StateDraft(committed)

    draft.append("notes", "b")
    draft["profile"]["tags"].append("changed through a read")
    profile = draft["profile"]
    profile["tags"].append("y")
    draft["profile"] = profile
    del draft["old"]

    assert committed == before
    assert draft["profile"] == {"tags": ["x", "y"]}


def test_the_draft_does_not_follow_later_changes_of_the_dict_it_was_given():
    committed = {"notes": ["a"]}
    draft = StateDraft(committed)
    committed["notes"].append("later")
    committed["extra"] = True

    assert dict(draft) == {"notes": ["a"]}


def test_values_read_written_or_returned_as_ops_are_copies():
    value = {"nested": [1]}
    draft = StateDraft({})
    draft["key"] = value
    value["nested"].append(2)
    draft["key"]["nested"].append(3)
    draft.ops()[0].value["nested"].append(4)

    assert draft["key"] == {"nested": [1]}
    assert draft.ops() == [ReplaceOp(key="key", value={"nested": [1]})]


def test_values_are_stored_in_their_json_form():
    class Profile(BaseModel):
        name: str
        scores: tuple[int, ...]

    draft = StateDraft({})
    draft["profile"] = Profile(name="Ada", scores=(1, 2))
    draft.append("pairs", (1, 2))

    assert draft["profile"] == {"name": "Ada", "scores": [1, 2]}
    assert draft.ops() == [
        ReplaceOp(key="profile", value={"name": "Ada", "scores": [1, 2]}),
        AppendOp(key="pairs", items=[[1, 2]]),
    ]


@pytest.mark.parametrize("value", [object(), {"ratio": math.nan}, [math.inf]])
def test_values_without_a_json_form_are_refused_and_not_recorded(value):
    draft = StateDraft({"kept": 1})

    with pytest.raises(ValueError, match=r"'bad'.*JSON"):
        draft["bad"] = value
    with pytest.raises(ValueError, match=r"'bad'.*JSON"):
        draft.append("bad", value)

    assert draft.ops() == []
    assert dict(draft) == {"kept": 1}


def test_keys_are_strings():
    draft = StateDraft({})

    with pytest.raises(TypeError, match="strings"):
        draft[1] = "one"
    with pytest.raises(TypeError, match="strings"):
        draft.append(("a",), 1)
    assert draft.ops() == []


def test_appending_to_a_value_that_is_not_a_list_is_refused():
    draft = StateDraft({"count": 1, "empty": None})

    with pytest.raises(TypeError, match=r"'count'.*int"):
        draft.append("count", 2)
    draft.append("empty", "first")

    assert draft.ops() == [AppendOp(key="empty", items=["first"])]
    assert draft["empty"] == ["first"]


def test_the_merge_function_applied_to_the_ops_gives_what_the_draft_reads():
    committed = {"count": 1, "notes": ["a"], "old": True, "kept": {"x": 1}}
    draft = StateDraft(committed)
    draft["count"] = 5
    draft.append("notes", "b")
    draft.delete("old")
    draft.append("fresh", 1, 2)
    draft.set("old", "back")
    draft.delete("count")

    state, warnings = apply_merge_ops(committed, draft.writes())

    assert state == dict(draft)
    assert state == {"notes": ["a", "b"], "kept": {"x": 1}, "fresh": [1, 2], "old": "back"}
    assert warnings == []


def test_parallel_drafts_merge_appends_and_the_later_set_wins():
    committed = {"notes": [], "status": "new"}
    first, second = StateDraft(committed), StateDraft(committed)
    first.append("notes", "from first")
    first["status"] = "first"
    second.append("notes", "from second")
    second["status"] = "second"

    state, warnings = apply_merge_ops(committed, StepWrites(ops=first.ops() + second.ops()))

    assert state == {"notes": ["from first", "from second"], "status": "second"}
    assert warnings == []


def test_the_staged_change_carries_the_ops_as_the_store_expects_them():
    draft = StateDraft({"notes": []})
    draft.append("notes", {"text": "hi"})
    draft["count"] = 1
    draft.delete("gone")

    change = draft.staged_change("call-1")

    assert change == StagedToolChange(tool_call_id="call-1", merge_ops=draft.ops())
    assert change.patches == []
    assert isinstance(draft.writes(), StepWrites)
    assert draft.writes().ops == draft.ops()
    [size] = check_staged_sizes("s-1", [change], limit=10_000)  # The store's pre-flight.
    assert size > 0
    stored = json.loads(json.dumps([merge_op_to_json(op) for op in change.merge_ops]))
    assert [merge_op_from_json(op) for op in stored] == draft.ops()
