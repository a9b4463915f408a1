"""The `SessionStateStore` conformance suite: every method and every error, on every backend.

Each test runs against the in-memory and the ORM backend; the ORM backend runs on SQLite or
PostgreSQL depending on DATABASE_URL (`.ci/run` runs both).
"""

import dataclasses
import inspect
import time
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.utils import timezone

from sessions_app.errors import (
    MessageIdConflict,
    MessageNotFound,
    RunAlreadyExists,
    RunNotFound,
    SessionAlreadyExists,
    SessionBusy,
    SessionNotFound,
    StateSizeExceeded,
    SubSessionRefNotFound,
    VersionConflict,
)
from sessions_app.stores import rules
from sessions_app.stores.base import DEFAULT_MAX_STAGED_CHANGES_BYTES, SessionStateStore
from sessions_app.stores.orm import ORMSessionStateStore
from sessions_app.stores.types import (
    NEW_ROOT,
    AppendOp,
    CasApplied,
    CasRejected,
    CheckpointMeta,
    DeleteOp,
    Lease,
    Message,
    MessageRole,
    ReplaceOp,
    RunStatus,
    SessionStatus,
    StagedChangeStatus,
    StagedToolChange,
    StepWrites,
    SubSessionMode,
    SubSessionRef,
    SubSessionRefUpdate,
    ToolCallRecord,
)


def user(text: str, **fields) -> Message:
    return Message(role=MessageRole.USER, content=text, **fields)


def assistant(text: str, **fields) -> Message:
    return Message(role=MessageRole.ASSISTANT, content=text, **fields)


def contents(store: SessionStateStore, session_id: str) -> list[str]:
    page = store.get_messages(session_id, limit=1000)
    return [message.content for message in page.messages]


def commit_step(
    store: SessionStateStore,
    session_id: str,
    *,
    step: int,
    messages: list[Message] = (),
    custom_state: dict | None = None,
    expected_history_revision: int | None = None,
):
    """Commit one step on the loaded state, as the runtime does; return the commit result."""
    state = store.load_state(session_id)
    state.step_count = step
    if custom_state is not None:
        state.custom_state = custom_state
    return store.save_state_and_promote_staging(
        session_id,
        state,
        list(messages),
        CheckpointMeta(step_id=f"step-{step}", step_count=step, stream_sequence=step * 10),
        expected_version=state.version,
        expected_history_revision=expected_history_revision,
    )


# The contract itself


def test_every_method_has_an_async_twin_that_returns_the_same_result(store):
    abstract = sorted(SessionStateStore.__abstractmethods__)
    assert len(abstract) >= 30
    for name in abstract:
        twin = getattr(store, f"a{name}")
        assert inspect.iscoroutinefunction(twin), name

    created = async_to_sync(store.acreate_session)(agent_type="assistant", tags=["t"])
    async_to_sync(store.aappend_messages)(created.session_id, [user("hi")])
    loaded = async_to_sync(store.aload_state)(created.session_id)

    assert loaded.session_id == created.session_id
    assert loaded.tags == ["t"]
    assert async_to_sync(store.aget_message_count)(created.session_id) == 1


# Session lifecycle


def test_create_session_returns_an_active_session_at_version_1(store):
    state = store.create_session("s-1", agent_type="assistant")

    assert state.session_id == "s-1"
    assert state.agent_type == "assistant"
    assert state.stream_id == "s-1"
    assert state.status == SessionStatus.ACTIVE
    assert (state.version, state.step_count, state.message_count, state.resume_count) == (
        1,
        0,
        0,
        0,
    )
    assert state.custom_state is None
    assert state.created_at is not None
    assert state.created_at == state.updated_at
    assert store.load_state("s-1") == state


def test_create_session_keeps_every_given_field(store, django_user_model):
    owner = django_user_model.objects.create_user("owner")
    expires_at = timezone.now() + timedelta(hours=1)

    created = store.create_session(
        "child",
        agent_type="researcher",
        stream_id="stream-9",
        parent_session_id="parent",
        root_session_id="root",
        owner_id=owner.pk,
        user_id="external-7",
        tags=["a", "b"],
        metadata={"team": "red"},
        custom_state={"notes": []},
        expires_at=expires_at,
        tracing_context={"traceId": "t", "rootSpanId": "r"},
    )
    loaded = store.load_state("child")

    assert loaded == created
    assert (loaded.stream_id, loaded.parent_session_id, loaded.root_session_id) == (
        "stream-9",
        "parent",
        "root",
    )
    assert (loaded.owner_id, loaded.user_id) == (owner.pk, "external-7")
    assert (loaded.tags, loaded.metadata) == (["a", "b"], {"team": "red"})
    assert loaded.custom_state == {"notes": []}
    assert loaded.expires_at == expires_at
    assert loaded.tracing_context == {"traceId": "t", "rootSpanId": "r"}


def test_create_session_generates_distinct_ids(store):
    first = store.create_session(agent_type="assistant")
    second = store.create_session(agent_type="assistant")

    assert first.session_id != second.session_id
    assert store.session_exists(first.session_id)
    assert store.session_exists(second.session_id)


def test_creating_a_taken_id_raises_and_leaves_the_session_alone(store):
    store.create_session("s-1", agent_type="assistant", tags=["original"])

    with pytest.raises(SessionAlreadyExists) as caught:
        store.create_session("s-1", agent_type="other", tags=["imposter"])

    assert caught.value.code == "session-exists"
    assert caught.value.details == {"session_id": "s-1"}
    state = store.load_state("s-1")
    assert (state.agent_type, state.tags) == ("assistant", ["original"])


@pytest.mark.parametrize("bad_id", ["", "x" * 256, "a\x00b", "a\udc00b"])
def test_create_session_rejects_unusable_ids(store, bad_id):
    with pytest.raises(ValueError, match="session id"):
        store.create_session(bad_id, agent_type="assistant")

    assert store.list_sessions().total == 0


@pytest.mark.parametrize(
    ("labels", "problem"),
    [
        ({"tags": "urgent"}, "tags"),
        ({"tags": ["ok", 7]}, "tags"),
        ({"metadata": {"tier": 3}}, "metadata"),
        ({"metadata": ["k", "v"]}, "metadata"),
    ],
)
def test_tags_and_metadata_must_be_strings(store, session_id, labels, problem):
    with pytest.raises(ValueError, match=problem):
        store.create_session("labelled", agent_type="assistant", **labels)
    with pytest.raises(ValueError, match=problem):
        store.save_state(session_id, dataclasses.replace(store.load_state(session_id), **labels))

    assert not store.session_exists("labelled")
    assert store.load_state(session_id).version == 1


@pytest.mark.parametrize(
    ("labels", "problem"),
    [
        ({"tags": ["ok", "n\x00l"]}, "tags must not hold a NUL character"),
        ({"metadata": {"k\x00": "v"}}, "metadata must not hold a NUL character"),
        ({"metadata": {"k": "\ud800"}}, "metadata must not hold an unpaired surrogate"),
    ],
)
def test_labels_no_database_stores_are_refused(store, session_id, labels, problem):
    with pytest.raises(ValueError, match=problem):
        store.create_session("labelled", agent_type="assistant", **labels)
    with pytest.raises(ValueError, match=problem):
        store.save_state(session_id, dataclasses.replace(store.load_state(session_id), **labels))
    with pytest.raises(ValueError, match=problem):
        store.update_labels(session_id, labels)

    assert not store.session_exists("labelled")
    state = store.load_state(session_id)
    assert (state.version, state.tags, state.metadata) == (1, [], {})


@pytest.mark.parametrize(
    ("names", "problem"),
    [
        ({"name": "n\x00"}, "name must not hold a NUL character"),
        ({"model": "m\ud800"}, "model must not hold an unpaired surrogate"),
        ({"source": "s\x00"}, "source must not hold a NUL character"),
        ({"user_id": "u\x00"}, "user id must not hold a NUL character"),
    ],
)
def test_names_no_database_stores_are_refused(store, names, problem):
    with pytest.raises(ValueError, match=problem):
        store.create_session("named", agent_type="assistant", **names)

    assert not store.session_exists("named")


def test_session_exists_answers_for_missing_sessions(store):
    assert store.session_exists("nope") is False


def test_delete_session_removes_everything_recorded_under_it(store, session_id):
    other = store.create_session(agent_type="assistant").session_id
    store.append_messages(session_id, [user("hello")])
    store.append_messages(other, [user("kept")])
    store.create_run(session_id, "run-1")
    store.set_interrupt_flag(session_id, "stop")
    store.add_sub_session_refs(
        session_id, [SubSessionRef(sub_session_id="c", agent_type="x", parent_tool_call_id="t")]
    )
    store.stage_changes(session_id, "step-1", [StagedToolChange(tool_call_id="t")])
    commit_step(store, session_id, step=1)

    assert store.delete_session(session_id) is True

    assert store.load_state(session_id) is None
    assert store.get_current_run(session_id) is None
    assert store.check_interrupt_flag(session_id) is None
    assert store.get_latest_checkpoint(session_id) is None
    with pytest.raises(RunNotFound):
        store.update_run_status("run-1", RunStatus.COMPLETED)
    # The id is free again and starts empty; other sessions are untouched.
    store.create_session(session_id, agent_type="assistant")
    assert store.get_message_count(session_id) == 0
    assert store.get_sub_session_refs(session_id) == []
    assert store.get_staged_changes(session_id) == []
    assert contents(store, other) == ["kept"]


def test_delete_session_of_missing_session_returns_false(store):
    assert store.delete_session("nope") is False


def test_update_labels_replaces_only_the_named_labels_and_bumps_the_version(store, session_id):
    before = store.load_state(session_id)
    expiry = timezone.now() + timedelta(days=1)

    updated = store.update_labels(session_id, {"tags": ["kept"], "expires_at": expiry})

    assert (updated.tags, updated.expires_at) == (["kept"], expiry)
    assert updated.metadata == before.metadata
    assert updated.version == before.version + 1
    assert store.load_state(session_id) == updated
    cleared = store.update_labels(session_id, {"metadata": {"team": "b"}, "expires_at": None})
    assert (cleared.tags, cleared.metadata, cleared.expires_at) == (["kept"], {"team": "b"}, None)


@pytest.mark.parametrize(
    ("labels", "problem"),
    [
        ({"status": "completed"}, "not status"),
        ({"version": 9}, "not version"),
        ({"tags": "one"}, "tags must be"),
        ({"expires_at": "tomorrow"}, "expires_at must be"),
    ],
)
def test_update_labels_refuses_anything_but_valid_labels(store, session_id, labels, problem):
    before = store.load_state(session_id)

    with pytest.raises(ValueError, match=problem):
        store.update_labels(session_id, labels)
    assert store.load_state(session_id) == before


def test_update_labels_is_refused_while_a_step_holds_the_lease(store, session_id):
    store.acquire_lease(session_id, "worker-a", ttl=30)
    before = store.load_state(session_id)

    with pytest.raises(SessionBusy):
        store.update_labels(session_id, {"tags": ["late"]})
    assert store.load_state(session_id) == before
    store.release_lease(session_id, "worker-a")
    assert store.update_labels(session_id, {"tags": ["late"]}).tags == ["late"]
    with pytest.raises(SessionNotFound):
        store.update_labels("missing", {"tags": []})


# State


def test_load_state_of_missing_session_is_none(store):
    assert store.load_state("nope") is None


def test_save_state_writes_mutable_fields_and_bumps_version(store, session_id):
    state = store.load_state(session_id)
    expires_at = timezone.now() + timedelta(days=1)
    changes = {
        "stream_id": "stream-2",
        "custom_state": {"count": 3, "items": ["a"]},
        "step_count": 4,
        "status": SessionStatus.SUSPENDED_CLIENT_TOOL,
        "output": {"answer": 42},
        "error": "boom",
        "failure_reason": "parent_suspended",
        "aborted": True,
        "abort_reason": "user",
        "suspended_awaiting_children": {"child-1": {"toolCallId": "t1"}},
        "suspended_step_id": "step-4",
        "pending_client_tool_calls": {"t2": {"toolName": "confirm", "input": {"x": 1}}},
        "completed_client_tool_calls": {"t0": 1700000000000},
        "client_tool_call_ownership": {"t2": session_id},
        "interrupt_context": {"reason": "user"},
        "tracing_context": {"traceId": "abc", "rootSpanId": "def"},
        "expires_at": expires_at,
        "tags": ["x", "y"],
        "metadata": {"k": "v"},
        "resume_count": 2,
    }
    assert set(changes) == set(rules.MUTABLE_STATE_FIELDS)

    new_version = store.save_state(session_id, dataclasses.replace(state, **changes))

    loaded = store.load_state(session_id)
    assert new_version == state.version + 1 == loaded.version
    for name, value in changes.items():
        assert getattr(loaded, name) == value, name
    assert loaded.updated_at > state.updated_at


def test_save_state_never_changes_identity_or_ownership(store, django_user_model):
    owner = django_user_model.objects.create_user("owner")
    original = store.create_session(
        "s-1", agent_type="assistant", owner_id=owner.pk, user_id="u-1", parent_session_id="p"
    )
    intruder = django_user_model.objects.create_user("intruder")

    store.save_state(
        "s-1",
        dataclasses.replace(
            original,
            agent_type="other",
            owner_id=intruder.pk,
            user_id="u-2",
            parent_session_id="q",
            root_session_id="r",
            message_count=99,
            version=50,
        ),
    )

    loaded = store.load_state("s-1")
    assert (loaded.agent_type, loaded.owner_id, loaded.user_id) == ("assistant", owner.pk, "u-1")
    assert (loaded.parent_session_id, loaded.root_session_id) == ("p", None)
    assert (loaded.message_count, loaded.version) == (0, 2)


def test_save_state_with_a_stale_version_raises_and_writes_nothing(store, session_id):
    state = store.load_state(session_id)
    store.save_state(session_id, dataclasses.replace(state, custom_state={"who": "first"}))

    with pytest.raises(VersionConflict) as caught:
        store.save_state(
            session_id,
            dataclasses.replace(state, custom_state={"who": "zombie"}),
            expected_version=state.version,
        )

    assert caught.value.code == "version-conflict"
    assert caught.value.details == {
        "session_id": session_id,
        "expected_version": state.version,
        "current_version": state.version + 1,
    }
    loaded = store.load_state(session_id)
    assert loaded.custom_state == {"who": "first"}
    assert loaded.version == state.version + 1


def test_save_state_with_the_current_version_succeeds(store, session_id):
    state = store.load_state(session_id)

    assert store.save_state(session_id, state, expected_version=state.version) == state.version + 1


def test_save_state_of_missing_session_raises(store, session_id):
    state = store.load_state(session_id)

    with pytest.raises(SessionNotFound) as caught:
        store.save_state("nope", state)

    assert caught.value.code == "session-not-found"


def test_values_are_copied_in_and_out(store, session_id):
    state = store.load_state(session_id)
    custom = {"items": [1]}
    store.save_state(session_id, dataclasses.replace(state, custom_state=custom))
    custom["items"].append(2)

    loaded = store.load_state(session_id)
    loaded.custom_state["items"].append(3)
    loaded.tags.append("leak")

    assert store.load_state(session_id).custom_state == {"items": [1]}
    assert store.load_state(session_id).tags == []


def test_values_json_cannot_hold_are_rejected_without_a_write(store, session_id):
    state = store.load_state(session_id)

    with pytest.raises(TypeError):
        store.save_state(session_id, dataclasses.replace(state, custom_state={"x": object()}))

    assert store.load_state(session_id).version == state.version


def test_invalid_status_is_rejected(store, session_id):
    state = store.load_state(session_id)

    with pytest.raises(ValueError, match="sleeping"):
        store.save_state(session_id, dataclasses.replace(state, status="sleeping"))
    with pytest.raises(ValueError, match="sleeping"):
        store.update_status(session_id, "sleeping")

    assert store.load_state(session_id).version == state.version


# The atomic step commit


def test_step_commit_appends_writes_promotes_and_checkpoints_together(store, session_id):
    store.append_messages(session_id, [user("question")])
    store.stage_changes(
        session_id,
        "step-1",
        [
            StagedToolChange(
                tool_call_id="call-1",
                patches=[{"op": "add", "path": "/notes/-", "value": "n"}],
                merge_ops=[AppendOp(key="notes", items=["n"])],
            )
        ],
    )
    store.stage_changes(session_id, "step-2", [StagedToolChange(tool_call_id="call-9")])
    store.create_run(session_id, "run-1")
    state = store.load_state(session_id)
    state.custom_state = {"notes": ["n"]}
    state.step_count = 1

    result = store.save_state_and_promote_staging(
        session_id,
        state,
        [
            assistant("calling", tool_calls=[{"id": "call-1"}]),
            Message(role="tool", content="ok", tool_call_id="call-1"),
        ],
        CheckpointMeta(step_id="step-1", step_count=1, stream_sequence=7, run_id="run-1"),
        expected_version=state.version,
    )

    loaded = store.load_state(session_id)
    assert result.state.version == state.version + 1 == loaded.version
    assert (loaded.custom_state, loaded.step_count, loaded.message_count) == (
        {"notes": ["n"]},
        1,
        3,
    )
    assert contents(store, session_id) == ["question", "calling", "ok"]

    checkpoint = store.get_latest_checkpoint(session_id)
    assert checkpoint.checkpoint_id == result.checkpoint_id
    assert (checkpoint.step_id, checkpoint.step_count, checkpoint.stream_sequence) == (
        "step-1",
        1,
        7,
    )
    assert (checkpoint.message_count, checkpoint.run_id) == (3, "run-1")
    assert checkpoint.state["custom_state"] == {"notes": ["n"]}
    assert checkpoint.state["version"] == result.state.version
    assert checkpoint.state["message_count"] == 3

    promoted = store.get_staged_changes(session_id, step_id="step-1")
    assert [(c.status, c.checkpoint_id) for c in promoted] == [
        (StagedChangeStatus.PROMOTED, result.checkpoint_id)
    ]
    other_step = store.get_staged_changes(session_id, step_id="step-2")
    assert [c.status for c in other_step] == [StagedChangeStatus.STAGED]


def test_step_commit_stages_its_own_changes_and_drops_its_tool_call_records(store, session_id):
    old = StagedToolChange(tool_call_id="call-2", merge_ops=[ReplaceOp(key="old", value=0)])
    store.stage_changes(session_id, "step-1", [StagedToolChange(tool_call_id="call-0"), old])
    store.begin_tool_calls(session_id, "step-1", ["call-1", "call-2"])
    store.begin_tool_calls(session_id, "step-2", ["call-1"])
    first, last = (
        StagedToolChange(tool_call_id="call-1", merge_ops=[ReplaceOp(key="n", value=value)])
        for value in (1, 2)
    )
    state = store.load_state(session_id)
    state.step_count = 1

    result = store.save_state_and_promote_staging(
        session_id,
        state,
        [assistant("done")],
        CheckpointMeta(step_id="step-1", step_count=1, stream_sequence=0),
        expected_version=state.version,
        stage=[first, StagedToolChange(tool_call_id="call-2"), last],
        forget_tool_calls=True,
    )

    staged = store.get_staged_changes(session_id, step_id="step-1")
    assert sorted((c.tool_call_id, c.status, c.checkpoint_id) for c in staged) == [
        ("call-0", StagedChangeStatus.PROMOTED, result.checkpoint_id),
        ("call-1", StagedChangeStatus.PROMOTED, result.checkpoint_id),
        ("call-2", StagedChangeStatus.PROMOTED, result.checkpoint_id),
    ]
    assert next(c for c in staged if c.tool_call_id == "call-1").merge_ops == last.merge_ops
    assert next(c for c in staged if c.tool_call_id == "call-2").merge_ops == []  # Replaced.
    assert store.get_tool_calls(session_id, "step-1") == {}
    assert list(store.get_tool_calls(session_id, "step-2")) == ["call-1"]


def test_step_commit_that_fails_stages_and_forgets_nothing(store, session_id):
    store.begin_tool_calls(session_id, "step-1", ["call-1"])
    state = store.load_state(session_id)
    store.update_status(session_id, SessionStatus.PAUSED)
    oversized = StagedToolChange(
        tool_call_id="call-2",
        merge_ops=[ReplaceOp(key="big", value="x" * DEFAULT_MAX_STAGED_CHANGES_BYTES)],
    )

    for version, stage in ((state.version, [oversized]), (state.version, [])):
        with pytest.raises((VersionConflict, StateSizeExceeded)):
            store.save_state_and_promote_staging(
                session_id,
                state,
                [assistant("lost")],
                CheckpointMeta(step_id="step-1", step_count=1, stream_sequence=0),
                expected_version=version,
                stage=[StagedToolChange(tool_call_id="call-1"), *stage],
                forget_tool_calls=True,
            )

    assert store.get_staged_changes(session_id) == []
    assert list(store.get_tool_calls(session_id, "step-1")) == ["call-1"]
    assert contents(store, session_id) == []


def test_step_commit_with_a_stale_version_writes_nothing(store, session_id):
    store.stage_changes(session_id, "step-1", [StagedToolChange(tool_call_id="call-1")])
    state = store.load_state(session_id)
    store.update_status(session_id, SessionStatus.PAUSED)

    with pytest.raises(VersionConflict):
        store.save_state_and_promote_staging(
            session_id,
            dataclasses.replace(state, custom_state={"zombie": True}),
            [assistant("from a zombie worker")],
            CheckpointMeta(step_id="step-1", step_count=1, stream_sequence=1),
            expected_version=state.version,
        )

    loaded = store.load_state(session_id)
    assert (loaded.status, loaded.custom_state, loaded.message_count) == (
        SessionStatus.PAUSED,
        None,
        0,
    )
    assert store.get_messages(session_id).messages == []
    assert store.list_checkpoints(session_id) == []
    assert [c.status for c in store.get_staged_changes(session_id)] == [StagedChangeStatus.STAGED]


def test_step_commit_with_bad_input_writes_nothing(store, session_id):
    state = store.load_state(session_id)

    with pytest.raises(ValueError, match="narrator"):
        store.save_state_and_promote_staging(
            session_id,
            dataclasses.replace(state, custom_state={"x": 1}),
            [assistant("fine"), Message(role="narrator", content="bad")],
            CheckpointMeta(step_id="step-1", step_count=1, stream_sequence=1),
        )

    assert store.load_state(session_id).version == state.version
    assert store.get_message_count(session_id) == 0
    assert store.list_checkpoints(session_id) == []


@pytest.mark.parametrize(
    ("checkpoint", "problem"),
    [
        (CheckpointMeta(step_id="", step_count=1, stream_sequence=0), "step id"),
        (CheckpointMeta(step_id="s", step_count=-1, stream_sequence=0), "step count"),
        (CheckpointMeta(step_id="s", step_count=1, stream_sequence=-5), "stream sequence"),
    ],
)
def test_step_commit_rejects_bad_checkpoint_metadata(store, session_id, checkpoint, problem):
    state = store.load_state(session_id)

    with pytest.raises(ValueError, match=problem):
        store.save_state_and_promote_staging(session_id, state, [user("hi")], checkpoint)

    assert store.get_message_count(session_id) == 0
    assert store.load_state(session_id).version == state.version


def test_counters_must_not_be_negative(store, session_id):
    state = store.load_state(session_id)
    store.create_run(session_id, "run-1")

    with pytest.raises(ValueError, match="step count"):
        store.save_state(session_id, dataclasses.replace(state, step_count=-1))
    with pytest.raises(ValueError, match="resume count"):
        store.save_state(session_id, dataclasses.replace(state, resume_count=-1))
    with pytest.raises(ValueError, match="step count"):
        store.update_run_status("run-1", RunStatus.COMPLETED, step_count=-2)

    assert store.load_state(session_id).version == state.version
    assert store.get_current_run(session_id).status == RunStatus.RUNNING


def test_step_commit_on_missing_session_raises(store, session_id):
    state = store.load_state(session_id)

    with pytest.raises(SessionNotFound):
        store.save_state_and_promote_staging(
            "nope", state, [], CheckpointMeta(step_id="s", step_count=1, stream_sequence=0)
        )


def test_step_commit_returns_its_messages_as_stored(store, session_id):
    store.append_messages(session_id, [user("question")])

    result = commit_step(
        store, session_id, step=1, messages=[assistant("answer"), user("more", id="u2")]
    )

    assert result.messages == store.get_history(session_id)[1:]
    assert [(m.sequence, m.content) for m in result.messages] == [(2, "answer"), (3, "more")]


# History revisions


@pytest.fixture
def revised(store, session_id):
    """Return a reader of the session's history revision, as a step's claim reads it."""
    if not store.supports_history_revisions:
        pytest.skip(f"{type(store).__name__} keeps no history revisions")

    def read() -> int:
        revision = store.claim_step(session_id, "holder", 60).history_revision
        store.release_lease(session_id, "holder")
        return revision

    return read


def test_the_database_store_keeps_history_revisions():
    assert ORMSessionStateStore.supports_history_revisions  # Its tests must run, never skip.


def test_every_write_to_messages_or_compactions_moves_the_history_revision(
    store, session_id, revised
):
    writes = {
        "append": lambda: store.append_messages(
            session_id, [user(f"m{n}", id=f"m{n}") for n in range(1, 6)]
        ),
        "step commit": lambda: commit_step(store, session_id, step=1, messages=[assistant("a")]),
        "edit": lambda: store.update_message(session_id, user("edited", id="m1")),
        "compaction": lambda: store.add_compaction(session_id, "Summary", "m1", "m2"),
        "delete": lambda: store.delete_messages(session_id, ["m5"]),
        "truncate": lambda: store.truncate_messages(session_id, 3),
        "clear": lambda: store.clear_messages(session_id),
    }
    revisions = [revised()]
    for write in writes.values():
        write()
        revisions.append(revised())

    assert revisions == sorted(set(revisions)), dict(
        zip(["before", *writes], revisions, strict=True)
    )


def test_writes_that_leave_messages_alone_keep_the_history_revision(store, session_id, revised):
    store.append_messages(session_id, [user("m1")])
    before = revised()

    commit_step(store, session_id, step=1, custom_state={"k": 1})  # No messages.
    store.rename_session(session_id, "renamed")
    store.delete_messages(session_id, ["not-there"])

    assert revised() == before


def test_a_commit_tells_whether_the_history_stood_at_the_revision_expected(
    store, session_id, revised
):
    store.append_messages(session_id, [user("m1", id="m1")])
    expected = revised()

    first = commit_step(
        store, session_id, step=1, messages=[assistant("a")], expected_history_revision=expected
    )
    assert first.history_revision == revised() > expected
    store.update_message(session_id, user("edited", id="m1"))  # As a person might, meanwhile.
    second = commit_step(
        store,
        session_id,
        step=2,
        messages=[assistant("b")],
        expected_history_revision=first.history_revision,
    )

    assert second.history_revision is None
    assert contents(store, session_id) == ["edited", "a", "b"]


# Messages


def test_append_messages_assigns_gap_free_sequences_and_chains_parents(store, session_id):
    first = store.append_messages(session_id, [user("one"), assistant("two")])
    second = store.append_messages(session_id, [user("three")])

    stored = store.get_messages(session_id).messages
    assert [m.sequence for m in stored] == [1, 2, 3]
    assert [m.parent_id for m in stored] == [None, stored[0].id, stored[1].id]
    assert stored == first + second
    assert all(m.id and m.created_at for m in stored)


def test_append_messages_keeps_every_field(store, session_id):
    message = Message(
        role=MessageRole.ASSISTANT,
        content="checking",
        id="m-1",
        tool_calls=[{"id": "c1", "name": "lookup", "arguments": {"q": "x"}}],
        tool_call_id="c0",
        name="helper",
        parts=[{"type": "text", "text": "checking"}],
        metadata={"model": "scripted"},
    )

    store.append_messages(session_id, [message])

    stored = store.get_messages(session_id).messages[0]
    assert dataclasses.replace(stored, sequence=None, created_at=None) == message
    assert stored.sequence == 1


def test_append_messages_does_not_bump_the_version(store, session_id):
    before = store.load_state(session_id)

    store.append_messages(session_id, [user("hi")])

    after = store.load_state(session_id)
    assert (after.version, after.message_count) == (before.version, 1)


def test_appending_known_ids_again_is_a_no_op(store, session_id):
    store.append_messages(session_id, [user("one", id="m-1"), assistant("two", id="m-2")])

    retried = store.append_messages(
        session_id, [user("one", id="m-1"), assistant("two", id="m-2"), user("three", id="m-3")]
    )

    assert [m.id for m in retried] == ["m-3"]
    assert retried[0].parent_id == "m-2"
    assert [m.sequence for m in store.get_messages(session_id).messages] == [1, 2, 3]
    assert store.get_message_count(session_id) == 3


def test_a_repeated_id_within_one_batch_is_stored_once(store, session_id):
    stored = store.append_messages(session_id, [user("one", id="m-1"), user("again", id="m-1")])

    assert [m.content for m in stored] == ["one"]
    assert store.get_message_count(session_id) == 1


def test_appending_an_id_of_another_session_raises_and_writes_nothing(store, session_id):
    other = store.create_session(agent_type="assistant").session_id
    store.append_messages(other, [user("theirs", id="m-1")])

    with pytest.raises(MessageIdConflict) as caught:
        store.append_messages(session_id, [user("mine"), user("clash", id="m-1")])

    assert caught.value.code == "message-id-conflict"
    assert store.get_message_count(session_id) == 0
    assert contents(store, other) == ["theirs"]


def test_explicit_parents_are_kept_inside_the_session_and_dropped_outside(store, session_id):
    other = store.create_session(agent_type="assistant").session_id
    store.append_messages(other, [user("elsewhere", id="foreign")])
    store.append_messages(session_id, [user("root", id="r"), assistant("a", id="a")])

    store.append_messages(
        session_id,
        [assistant("branch", id="b", parent_id="r"), user("lost", id="l", parent_id="foreign")],
    )

    parents = {m.id: m.parent_id for m in store.get_messages(session_id).messages}
    assert parents == {"r": None, "a": "r", "b": "r", "l": None}


def test_append_to_missing_session_raises(store):
    with pytest.raises(SessionNotFound):
        store.append_messages("nope", [user("hi")])


def test_get_messages_paginates_in_sequence_order(store, session_id):
    store.append_messages(session_id, [user(str(n)) for n in range(1, 6)])

    middle = store.get_messages(session_id, offset=1, limit=2)
    tail = store.get_messages(session_id, offset=4, limit=2)
    beyond = store.get_messages(session_id, offset=10, limit=2)

    assert [m.content for m in middle.messages] == ["2", "3"]
    assert (middle.total, middle.offset, middle.limit, middle.has_more) == (5, 1, 2, True)
    assert [m.content for m in tail.messages] == ["5"]
    assert tail.has_more is False
    assert (beyond.messages, beyond.has_more) == ([], False)


@pytest.mark.parametrize(("offset", "limit"), [(-1, 10), (0, 0), (0, 1001)])
def test_get_messages_rejects_bad_pages(store, session_id, offset, limit):
    with pytest.raises(ValueError, match=r"offset|limit"):
        store.get_messages(session_id, offset=offset, limit=limit)


def test_message_reads_of_missing_session_raise(store):
    with pytest.raises(SessionNotFound):
        store.get_messages("nope")
    with pytest.raises(SessionNotFound):
        store.get_message_count("nope")


# Live agent state


def test_set_custom_state_replaces_the_state_whole_and_bumps_the_version(store, session_id):
    store.merge_custom_state(session_id, StepWrites(ops=[ReplaceOp(key="old", value=1)]))
    version = store.load_state(session_id).version

    new_version = store.set_custom_state(session_id, {"players": ["ada"]})

    state = store.load_state(session_id)
    assert (state.custom_state, state.version, new_version) == (
        {"players": ["ada"]},
        version + 1,
        version + 1,
    )
    assert store.set_custom_state(session_id, None, expected_version=new_version) == version + 2
    assert store.load_state(session_id).custom_state is None


def test_set_custom_state_refuses_a_stale_version_and_a_running_step(store, session_id):
    version = store.load_state(session_id).version
    with pytest.raises(VersionConflict):
        store.set_custom_state(session_id, {"a": 1}, expected_version=version - 1)
    store.acquire_lease(session_id, "worker-1", 30)
    with pytest.raises(SessionBusy):
        store.set_custom_state(session_id, {"a": 1})
    store.release_lease(session_id, "worker-1")
    store.set_custom_state(session_id, {"a": 2})
    assert store.load_state(session_id).custom_state == {"a": 2}
    with pytest.raises(SessionNotFound):
        store.set_custom_state("nope", {})


def test_set_custom_state_keeps_no_live_reference(store, session_id):
    mine = {"nested": {"n": 1}}
    store.set_custom_state(session_id, mine)
    mine["nested"]["n"] = 2

    assert store.load_state(session_id).custom_state == {"nested": {"n": 1}}


# Message tree


def ids(messages) -> list[str]:
    return [message.id for message in messages]


def test_a_branch_from_an_earlier_message_becomes_the_active_one(store, session_id):
    first, second, third = store.append_messages(
        session_id, [user("one", id="m1"), assistant("two", id="m2"), user("three", id="m3")]
    )
    store.append_messages(session_id, [assistant("two again", id="m4", parent_id="m1")])
    store.append_messages(session_id, [user("four", id="m5")])

    assert store.get_latest_leaf(session_id).id == "m5"
    assert ids(store.get_history(session_id)) == ["m1", "m4", "m5"]
    assert ids(store.get_history(session_id, "m3")) == ["m1", "m2", "m3"]
    assert store.get_path_length(session_id, "m3") == 3
    assert ids(store.get_branches(session_id, "m1")) == ["m2", "m4"]
    assert store.get_branches(session_id, "m5") == []
    assert store.get_message(session_id, "m2").content == "two"
    assert store.get_history(session_id, "m1")[0] == first
    assert (second.parent_id, third.parent_id) == ("m1", "m2")


def test_a_long_path_is_read_in_chunks_whole(store, session_id):
    store.append_messages(session_id, [user(f"message {n}", id=f"m{n}") for n in range(7)])

    history = store.get_history(session_id, chunk_size=2)

    assert ids(history) == [f"m{n}" for n in range(7)]
    assert store.get_path_length(session_id) == 7


def test_tree_reads_of_missing_things(store, session_id):
    other = store.create_session(agent_type="assistant").session_id
    store.append_messages(other, [user("elsewhere", id="theirs")])

    assert store.get_history(session_id) == []
    assert store.get_latest_leaf(session_id) is None
    assert store.get_path_length(session_id) == 0
    assert store.get_message(session_id, "theirs") is None
    with pytest.raises(MessageNotFound) as caught:
        store.get_history(session_id, "theirs")
    assert caught.value.code == "message-not-found"
    with pytest.raises(SessionNotFound):
        store.get_history("nope")
    with pytest.raises(SessionNotFound):
        store.get_latest_leaf("nope")


def test_an_explicit_new_root_starts_a_tree_of_its_own(store, session_id):
    store.append_messages(session_id, [user("one", id="m1"), assistant("two", id="m2")])
    store.append_messages(session_id, [user("fresh", id="r2", parent_id=NEW_ROOT)])
    store.append_messages(session_id, [assistant("reply", id="r3")])

    assert store.get_message(session_id, "r2").parent_id is None
    assert ids(store.get_history(session_id)) == ["r2", "r3"]
    assert ids(store.get_history(session_id, "m2")) == ["m1", "m2"]


def test_appending_a_stored_id_again_changes_nothing(store, session_id):
    store.append_messages(session_id, [user("one", id="m1"), assistant("two", id="m2")])

    again = store.append_messages(session_id, [user("one, edited", id="m1", parent_id="m2")])

    assert again == []
    assert store.get_message(session_id, "m1").content == "one"
    assert store.get_message_count(session_id) == 2


def test_update_message_replaces_content_and_keeps_its_place(store, session_id):
    store.append_messages(session_id, [user("one", id="m1"), assistant("two", id="m2")])
    before = store.load_state(session_id)
    time.sleep(0.002)

    updated = store.update_message(
        session_id,
        assistant("two, better", id="m2", parts=[{"type": "text", "text": "two, better"}]),
    )

    stored = store.get_message(session_id, "m2")
    assert stored == updated
    assert (stored.content, stored.parent_id, stored.sequence) == ("two, better", "m1", 2)
    assert stored.parts == [{"type": "text", "text": "two, better"}]
    after = store.load_state(session_id)
    assert after.updated_at > before.updated_at
    assert after.version == before.version
    with pytest.raises(MessageNotFound):
        store.update_message(session_id, user("x", id="missing"))


def test_delete_messages_makes_orphans_roots_and_counts(store, session_id):
    store.append_messages(
        session_id, [user("one", id="m1"), assistant("two", id="m2"), user("three", id="m3")]
    )
    other = store.create_session(agent_type="assistant").session_id
    store.append_messages(other, [user("theirs", id="t1")])
    before = store.load_state(session_id)
    time.sleep(0.002)

    deleted = store.delete_messages(session_id, ["m2", "t1", "never"])

    assert deleted == 1
    assert store.get_message(session_id, "m2") is None
    assert store.get_message(other, "t1") is not None
    assert store.get_message_count(session_id) == 2
    assert ids(store.get_history(session_id)) == ["m3"]
    assert store.get_message(session_id, "m3").parent_id is None
    assert store.load_state(session_id).updated_at > before.updated_at
    store.append_messages(session_id, [assistant("four", id="m4")])
    assert store.get_message(session_id, "m4").sequence == 4


def test_clear_messages_removes_messages_and_compactions(store, session_id):
    store.append_messages(session_id, [user("one", id="m1"), assistant("two", id="m2")])
    store.add_compaction(session_id, "summary", "m1", "m2")

    assert store.clear_messages(session_id) == 2

    assert store.get_history(session_id) == []
    assert store.get_compactions(session_id) == []
    assert store.get_message_count(session_id) == 0
    store.append_messages(session_id, [user("again", id="m1")])
    assert ids(store.get_history(session_id)) == ["m1"]


def test_truncating_to_a_checkpoint_brings_back_the_branch_active_then(store, session_id):
    store.append_messages(session_id, [user("one", id="m1"), assistant("two", id="m2")])
    store.append_messages(session_id, [assistant("two, again", id="b2", parent_id="m1")])
    kept = store.get_message_count(session_id)  # What a checkpoint records.
    store.append_messages(session_id, [user("three", id="m3", parent_id="m2")])

    store.truncate_messages(session_id, kept)

    assert store.get_latest_leaf(session_id).id == "b2"
    assert ids(store.get_history(session_id)) == ["m1", "b2"]
    assert ids(store.get_branches(session_id, "m1")) == ["m2", "b2"]


def test_tree_writes_to_a_missing_session_raise(store):
    with pytest.raises(SessionNotFound):
        store.update_message("nope", user("x", id="m1"))
    with pytest.raises(SessionNotFound):
        store.delete_messages("nope", ["m1"])
    with pytest.raises(SessionNotFound):
        store.clear_messages("nope")
    with pytest.raises(SessionNotFound):
        store.add_compaction("nope", "s", "m1", "m2")
    with pytest.raises(SessionNotFound):
        store.get_compactions("nope")
    with pytest.raises(SessionNotFound):
        store.rename_session("nope", "name")


# Compaction overlays


def test_a_compaction_stands_in_for_its_range_and_keeps_the_originals(store, session_id):
    store.append_messages(session_id, [user(f"m{n}", id=f"m{n}") for n in range(1, 7)])

    compaction = store.add_compaction(session_id, "Summary of 2..4", "m2", "m4")

    history = store.get_history(session_id)
    assert ids(history) == ["m1", f"compaction_{compaction.compaction_id}", "m5", "m6"]
    assert (history[1].role, history[1].content) == (MessageRole.ASSISTANT, "Summary of 2..4")
    assert history[1].parts == [{"type": "text", "text": "Summary of 2..4"}]
    assert ids(store.get_path(session_id)) == [f"m{n}" for n in range(1, 7)]
    assert store.get_path_length(session_id) == 6
    assert store.get_message(session_id, "m3").content == "m3"
    assert store.get_compactions(session_id) == [compaction]


def test_a_compaction_shows_only_on_branches_holding_both_ends(store, session_id):
    store.append_messages(session_id, [user(f"m{n}", id=f"m{n}") for n in range(1, 5)])
    store.append_messages(session_id, [assistant("other", id="b3", parent_id="m2")])
    compaction = store.add_compaction(session_id, "Summary", "m1", "m3")

    assert ids(store.get_history(session_id, "m4")) == [
        f"compaction_{compaction.compaction_id}",
        "m4",
    ]
    assert ids(store.get_history(session_id, "b3")) == ["m1", "m2", "b3"]


def test_the_newest_compaction_from_a_message_wins(store, session_id):
    store.append_messages(session_id, [user(f"m{n}", id=f"m{n}") for n in range(1, 6)])
    store.add_compaction(session_id, "first pass", "m1", "m2")
    second = store.add_compaction(session_id, "second pass", "m1", "m4")

    history = store.get_history(session_id)

    assert ids(history) == [f"compaction_{second.compaction_id}", "m5"]
    assert history[0].content == "second pass"


def test_a_compaction_needs_both_ends_in_the_session(store, session_id):
    other = store.create_session(agent_type="assistant").session_id
    store.append_messages(other, [user("theirs", id="t1")])
    store.append_messages(session_id, [user("mine", id="m1")])

    with pytest.raises(MessageNotFound):
        store.add_compaction(session_id, "s", "m1", "t1")
    assert store.get_compactions(session_id) == []


# Names


def test_a_session_keeps_its_name_model_and_source(store):
    state = store.create_session(
        agent_type="assistant", name="Trip plans", model="gpt-x", source="web"
    )
    time.sleep(0.002)

    store.rename_session(state.session_id, "Holiday plans")

    renamed = store.load_state(state.session_id)
    assert (renamed.name, renamed.model, renamed.source) == ("Holiday plans", "gpt-x", "web")
    assert renamed.version == state.version
    assert renamed.updated_at > state.updated_at
    summary = store.list_sessions().sessions[0]
    assert (summary.name, summary.model, summary.source) == ("Holiday plans", "gpt-x", "web")
    store.save_state(state.session_id, renamed)
    assert store.load_state(state.session_id).name == "Holiday plans"


# Full-text search


@pytest.fixture
def searchable(store, django_user_model):
    """Two sessions of one owner and one of another, holding messages to search."""
    if not store.supports_search:
        pytest.skip(f"{type(store).__name__} has no full-text search")
    owner = django_user_model.objects.create_user("searcher")
    other = django_user_model.objects.create_user("other")
    for session_id, owner_id, texts in [
        ("ops", owner.pk, ["We are deploying on Friday", "The deployment failed", "Lunch at noon"]),
        ("notes", owner.pk, ["Friday deployments need a rollback plan"]),
        ("theirs", other.pk, ["Their deployment is on Friday too"]),
    ]:
        store.create_session(session_id, agent_type="assistant", owner_id=owner_id)
        store.append_messages(session_id, [user(text) for text in texts])
    return owner


def test_the_database_store_has_full_text_search():
    assert ORMSessionStateStore.supports_search  # Its search tests must run, never skip.


def found(hits) -> set[tuple[str, str]]:
    return {(hit.session_id, hit.content) for hit in hits}


def test_a_session_search_stems_words_and_matches_the_phrase(store, searchable):
    deploy = found(store.search_messages("ops", "deploy"))
    phrase = found(store.search_messages("ops", "deploying on Friday"))
    out_of_order = store.search_messages("ops", "Friday deploying")

    assert deploy == {("ops", "We are deploying on Friday"), ("ops", "The deployment failed")}
    assert phrase == {("ops", "We are deploying on Friday")}
    assert out_of_order == []
    hit = store.search_messages("ops", "lunch")[0]
    assert (hit.role, hit.created_at is not None, hit.message_id) == (
        MessageRole.USER,
        True,
        store.get_messages("ops").messages[2].id,
    )


def test_an_owner_search_finds_every_word_in_their_sessions_only(store, searchable):
    hits = store.search_owner_messages(searchable.pk, "the Friday deployment")

    assert found(hits) == {
        ("ops", "We are deploying on Friday"),
        ("notes", "Friday deployments need a rollback plan"),
    }
    assert store.search_owner_messages(searchable.pk, "deployment", limit=1)[0].session_id in {
        "ops",
        "notes",
    }
    assert len(store.search_owner_messages(searchable.pk, "deployment", limit=2)) == 2


def test_a_message_too_long_to_index_whole_is_stored_and_found_by_its_start(store, searchable):
    words = " ".join(f"w{n:x}x" for n in range(120_000))  # Its tsvector would pass 1 MiB.

    store.append_messages("notes", [user(f"zeppelin {words} albatross", id="long")])

    assert store.get_message("notes", "long").content.endswith("albatross")
    assert [hit.message_id for hit in store.search_messages("notes", "zeppelin")] == ["long"]
    assert store.search_messages("notes", "albatross") == []


def test_search_takes_any_text_and_follows_deletions(store, searchable):
    assert store.search_messages("ops", "") == []
    assert found(store.search_messages("ops", '"failed*" (')) == {  # Words only; no syntax.
        ("ops", "The deployment failed")
    }
    assert store.search_owner_messages(searchable.pk, "the of and") == []

    store.truncate_messages("ops", 1)
    store.delete_session("notes")

    assert found(store.search_owner_messages(searchable.pk, "deployment")) == {
        ("ops", "We are deploying on Friday")
    }
    with pytest.raises(SessionNotFound):
        store.search_messages("notes", "deployment")


def test_truncate_keeps_the_first_messages_and_appends_continue_after_them(store, session_id):
    store.append_messages(session_id, [user(str(n)) for n in range(1, 6)])
    before = store.load_state(session_id)

    assert store.truncate_messages(session_id, 2) == 3

    assert contents(store, session_id) == ["1", "2"]
    assert store.get_message_count(session_id) == 2
    assert store.load_state(session_id).version == before.version
    appended = store.append_messages(session_id, [user("3b")])
    stored = store.get_messages(session_id).messages
    assert appended[0].sequence == 3
    assert appended[0].parent_id == stored[1].id


def test_truncate_to_zero_or_beyond_the_count(store, session_id):
    store.append_messages(session_id, [user("1"), user("2")])

    assert store.truncate_messages(session_id, 5) == 0
    assert store.get_message_count(session_id) == 2
    assert store.truncate_messages(session_id, 0) == 2
    assert store.get_messages(session_id).messages == []
    assert store.append_messages(session_id, [user("fresh")])[0].sequence == 1


def test_long_chained_histories_can_be_truncated_and_deleted(store, session_id):
    # Deleting a parent must not cascade down the chain: SQLite caps recursion at 1000 levels.
    store.append_messages(session_id, [user(str(n)) for n in range(1500)])

    assert store.truncate_messages(session_id, 10) == 1490
    store.append_messages(session_id, [user(str(n)) for n in range(1500)])

    assert store.delete_session(session_id) is True
    assert store.load_state(session_id) is None


def test_truncate_rejects_negative_counts_and_missing_sessions(store, session_id):
    with pytest.raises(ValueError, match="message_count"):
        store.truncate_messages(session_id, -1)
    with pytest.raises(SessionNotFound):
        store.truncate_messages("nope", 0)


# Custom-state merge


def test_merge_applies_replace_append_and_delete(store, session_id):
    state = store.load_state(session_id)
    store.save_state(
        session_id,
        dataclasses.replace(state, custom_state={"items": ["a"], "count": 1, "temp": "x"}),
    )

    result = store.merge_custom_state(
        session_id,
        StepWrites(
            ops=[
                AppendOp(key="items", items=["b", "c"]),
                ReplaceOp(key="count", value=5),
                DeleteOp(key="temp"),
                AppendOp(key="fresh", items=[1]),
                DeleteOp(key="never-there"),
            ]
        ),
    )

    loaded = store.load_state(session_id)
    assert loaded.custom_state == {"items": ["a", "b", "c"], "count": 5, "fresh": [1]}
    assert result.warnings == []
    assert result.new_version == loaded.version == state.version + 2


def test_merge_on_a_session_without_state_starts_from_empty(store, session_id):
    store.merge_custom_state(session_id, StepWrites(ops=[ReplaceOp(key="k", value={"v": 1})]))

    assert store.load_state(session_id).custom_state == {"k": {"v": 1}}


def test_replace_is_last_writer_wins(store, session_id):
    store.merge_custom_state(session_id, StepWrites(ops=[ReplaceOp(key="count", value=5)]))
    store.merge_custom_state(session_id, StepWrites(ops=[ReplaceOp(key="count", value=10)]))

    assert store.load_state(session_id).custom_state == {"count": 10}


def test_append_to_a_non_list_is_skipped_with_a_warning(store, session_id):
    store.merge_custom_state(session_id, StepWrites(ops=[ReplaceOp(key="items", value="text")]))

    result = store.merge_custom_state(
        session_id,
        StepWrites(ops=[AppendOp(key="items", items=["x"])], warnings=["from the tracker"]),
    )

    assert store.load_state(session_id).custom_state == {"items": "text"}
    assert result.warnings[0] == "from the tracker"
    assert "items" in result.warnings[1]
    assert "not a list" in result.warnings[1]


def test_merge_on_missing_session_raises(store):
    with pytest.raises(SessionNotFound):
        store.merge_custom_state("nope", StepWrites(ops=[]))


# Status and step count


def test_update_status_and_increment_step_count_bump_the_version(store, session_id):
    version = store.load_state(session_id).version

    assert store.update_status(session_id, SessionStatus.PAUSED) == version + 1
    assert store.increment_step_count(session_id) == 1
    assert store.increment_step_count(session_id) == 2

    loaded = store.load_state(session_id)
    assert (loaded.status, loaded.step_count, loaded.version) == (
        SessionStatus.PAUSED,
        2,
        version + 3,
    )


def test_status_writes_on_missing_session_raise(store):
    with pytest.raises(SessionNotFound):
        store.update_status("nope", SessionStatus.PAUSED)
    with pytest.raises(SessionNotFound):
        store.increment_step_count("nope")
    with pytest.raises(SessionNotFound):
        store.compare_and_set_status("nope", [SessionStatus.ACTIVE], SessionStatus.PAUSED)


def test_compare_and_set_applies_when_status_and_version_match(store, session_id):
    version = store.load_state(session_id).version

    result = store.compare_and_set_status(
        session_id,
        [SessionStatus.ACTIVE, SessionStatus.PAUSED],
        SessionStatus.INTERRUPTED,
        interrupt_context={"reason": "user"},
        error="stopped",
        failure_reason="user_interrupt",
        expected_version=version,
    )

    assert result == CasApplied(new_version=version + 1)
    assert result.ok is True
    loaded = store.load_state(session_id)
    assert (loaded.status, loaded.version) == (SessionStatus.INTERRUPTED, version + 1)
    assert (loaded.error, loaded.failure_reason) == ("stopped", "user_interrupt")
    assert loaded.interrupt_context == {"reason": "user"}


def test_compare_and_set_rejects_another_status_without_writing(store, session_id):
    store.update_status(session_id, SessionStatus.COMPLETED)
    version = store.load_state(session_id).version

    result = store.compare_and_set_status(
        session_id, [SessionStatus.ACTIVE], SessionStatus.FAILED, error="late"
    )

    assert result == CasRejected(current_status=SessionStatus.COMPLETED, current_version=version)
    assert result.ok is False
    loaded = store.load_state(session_id)
    assert (loaded.status, loaded.version, loaded.error) == (SessionStatus.COMPLETED, version, None)


def test_compare_and_set_rejects_a_stale_version_without_writing(store, session_id):
    version = store.load_state(session_id).version
    store.increment_step_count(session_id)

    result = store.compare_and_set_status(
        session_id, [SessionStatus.ACTIVE], SessionStatus.PAUSED, expected_version=version
    )

    assert result == CasRejected(current_status=SessionStatus.ACTIVE, current_version=version + 1)
    assert store.load_state(session_id).status == SessionStatus.ACTIVE


# Step leases


def test_a_lease_excludes_other_holders_until_it_expires(store, session_id):
    version = store.load_state(session_id).version

    first = store.acquire_lease(session_id, "worker-a", ttl=0.2)

    assert first == Lease(version=version + 1, taken_over=False)
    assert store.load_state(session_id).version == first.version
    assert store.acquire_lease(session_id, "worker-b", ttl=30) is None
    again = store.acquire_lease(session_id, "worker-a", ttl=30)  # Its own holder.
    assert again == Lease(version=first.version + 1, taken_over=False)
    assert store.renew_lease(session_id, "worker-a", ttl=0.1)
    time.sleep(0.15)
    second = store.acquire_lease(session_id, "worker-b", ttl=30)
    assert second == Lease(version=first.version + 2, taken_over=True, abandoned=1)
    assert not store.renew_lease(session_id, "worker-a", ttl=30)
    assert not store.release_lease(session_id, "worker-a")
    assert store.release_lease(session_id, "worker-b")
    third = store.acquire_lease(session_id, "worker-c", ttl=30)
    assert third == Lease(version=second.version + 1, taken_over=False)


def test_stalled_runs_are_those_nothing_moved_each_returned_once_per_window(store, session_id):
    store.create_run(session_id, "run-1")
    moving = store.create_session("moving", agent_type="a")
    store.create_run(moving.session_id, "run-m")
    ended = store.create_session("ended", agent_type="a")
    store.create_run(ended.session_id, "run-e")
    store.update_run_status("run-e", RunStatus.COMPLETED)
    idle_since = timezone.now() + timedelta(milliseconds=1)
    time.sleep(0.002)
    assert store.acquire_lease(moving.session_id, "worker", ttl=30)  # Held: it moves.

    [stalled] = store.mark_stalled_runs(idle_since)

    assert (stalled.session_id, stalled.run_id, stalled.step, stalled.recoveries) == (
        session_id,
        "run-1",
        1,
        1,
    )
    assert store.mark_stalled_runs(idle_since) == []  # Marked in this window already.
    later = timezone.now() + timedelta(milliseconds=1)
    time.sleep(0.002)
    [again] = store.mark_stalled_runs(later)
    assert (again.step, again.recoveries) == (1, 2)  # Stalled at the same step in a row.

    commit_step(store, session_id, step=1)
    latest = timezone.now() + timedelta(milliseconds=1)
    time.sleep(0.002)
    [moved_on] = store.mark_stalled_runs(latest, limit=1)
    assert (moved_on.step, moved_on.recoveries) == (2, 1)  # A committed step starts over.
    store.update_run_status("run-1", RunStatus.SUSPENDED)
    assert store.mark_stalled_runs(timezone.now() + timedelta(hours=1)) == [
        dataclasses.replace(moved_on, session_id="moving", run_id="run-m", step=1)
    ]  # Suspended runs wait for people; the moving one's lease went stale meanwhile.


def test_a_lease_left_unclean_is_free_and_reported_taken_over(store, session_id):
    store.acquire_lease(session_id, "worker-a", ttl=30)

    assert store.release_lease(session_id, "worker-a", clean=False)

    taken = store.acquire_lease(session_id, "worker-b", ttl=30)
    assert taken is not None
    assert taken.taken_over
    assert store.release_lease(session_id, "worker-b")
    assert not store.acquire_lease(session_id, "worker-c", ttl=30).taken_over


def test_holders_that_leave_a_step_in_a_row_are_counted_until_one_finishes(store, session_id):
    def claim(holder: str) -> Lease:
        lease = store.claim_step(session_id, holder, ttl=30).lease
        assert store.release_lease(session_id, holder, clean=False)  # Left unfinished.
        return lease

    assert [claim(f"worker-{n}").abandoned for n in range(4)] == [0, 1, 2, 3]
    assert store.acquire_lease(session_id, "worker-4", ttl=30).abandoned == 4
    store.save_state_and_promote_staging(  # Finishes the step; worker-4 keeps the lease.
        session_id,
        store.load_state(session_id),
        [],
        CheckpointMeta(step_id="step-1", step_count=1, stream_sequence=0),
    )
    assert store.claim_step(session_id, "worker-4", ttl=30).lease.abandoned == 0
    assert store.claim_step(session_id, "worker-5", ttl=30) is None  # Still worker-4's.
    assert store.release_lease(session_id, "worker-4", clean=False)
    assert claim("worker-5").abandoned == 1
    store.save_state_and_promote_staging(  # Finishes the step and frees the lease.
        session_id,
        store.load_state(session_id),
        [],
        CheckpointMeta(step_id="step-2", step_count=2, stream_sequence=0),
        release_lease_of="worker-5",
    )
    assert claim("worker-5").abandoned == 0
    assert claim("worker-6").abandoned == 1
    assert store.claim_step(session_id, "worker-7", ttl=30).lease.abandoned == 2
    assert store.release_lease(session_id, "worker-7")  # Cleanly.
    assert store.acquire_lease(session_id, "worker-8", ttl=30).abandoned == 0


def test_a_step_claim_takes_the_lease_and_reads_the_state_under_it(store, session_id):
    store.set_interrupt_flag(session_id, "enough")
    version = store.load_state(session_id).version

    claim = store.claim_step(session_id, "worker-a", ttl=0.1)

    assert claim.lease == Lease(version=version + 1, taken_over=False)
    assert claim.state == store.load_state(session_id)
    assert claim.state.interrupt_flag.reason == "enough"
    assert store.claim_step(session_id, "worker-b", ttl=30) is None
    time.sleep(0.15)
    taken = store.claim_step(session_id, "worker-b", ttl=30)
    assert taken.lease == Lease(version=version + 2, taken_over=True, abandoned=1)
    assert taken.state.version == version + 2
    with pytest.raises(SessionNotFound):
        store.claim_step("missing", "worker-a", ttl=30)


def test_a_step_claim_reads_the_current_run(store, session_id):
    assert store.claim_step(session_id, "worker-a", ttl=30).run is None
    store.create_run(session_id, "run-1", metadata={"firstStep": 1})
    store.update_run_status("run-1", RunStatus.COMPLETED, step_count=2)
    store.create_run(session_id, "run-2", metadata={"firstStep": 3})

    claim = store.claim_step(session_id, "worker-a", ttl=30)  # Its own lease, again.

    assert claim.lease.taken_over is False
    assert claim.run == store.get_current_run(session_id)
    assert (claim.run.run_id, claim.run.status, claim.run.metadata) == (
        "run-2",
        RunStatus.RUNNING,
        {"firstStep": 3},
    )


def test_a_step_commit_returns_the_session_as_it_left_it(store, session_id):
    """The commit hands what the run's next step under the kept lease goes on with: the
    session as stored then, with the interrupt flag set during the step, and its history
    revision; the lease stays its holder's."""
    store.create_run(session_id, "run-1", metadata={"firstStep": 1})
    claim = store.claim_step(session_id, "worker-a", ttl=30)
    store.set_interrupt_flag(session_id, "enough")
    state = dataclasses.replace(claim.state, step_count=1, custom_state={"k": 1})

    committed = store.save_state_and_promote_staging(  # Step 1 commits; worker-a keeps it.
        session_id,
        state,
        [assistant("a")],
        CheckpointMeta(step_id="run-1:1", step_count=1, stream_sequence=0),
        expected_version=claim.lease.version,
        expected_history_revision=claim.history_revision,
    )

    assert committed.state == store.load_state(session_id)
    assert committed.state.interrupt_flag.reason == "enough"
    assert committed.state.version == claim.lease.version + 1
    assert committed.state.custom_state == {"k": 1}
    assert store.claim_step(session_id, "worker-b", ttl=30) is None  # Still worker-a's.
    if store.supports_history_revisions:
        assert store.release_lease(session_id, "worker-a")
        again = store.claim_step(session_id, "worker-a", ttl=30)
        assert committed.revision == committed.history_revision == again.history_revision
    else:
        assert committed.revision is None


def test_leases_are_renewed_together_for_the_holders_that_still_hold_them(store, session_id):
    other = store.create_session(agent_type="assistant").session_id
    lost = store.create_session(agent_type="assistant").session_id
    store.acquire_lease(session_id, "worker-a", ttl=0.1)
    store.acquire_lease(other, "worker-b", ttl=0.1)
    store.acquire_lease(lost, "worker-c", ttl=0.05)
    time.sleep(0.1)
    store.acquire_lease(lost, "worker-d", ttl=30)  # worker-c's ran out and was taken.

    renewed = store.renew_leases(
        {session_id: "worker-a", other: "worker-b", lost: "worker-c", "missing": "worker-e"},
        ttl=30,
    )

    assert renewed == {session_id, other}
    time.sleep(0.1)  # Past the first expiry: the renewed leases hold.
    assert store.acquire_lease(session_id, "worker-x", ttl=30) is None
    assert store.acquire_lease(other, "worker-x", ttl=30) is None
    assert store.renew_leases({}, ttl=30) == set()


def test_a_worker_that_lost_its_lease_cannot_commit(store, session_id):
    stale = store.acquire_lease(session_id, "worker-a", ttl=0.05).version
    time.sleep(0.1)
    store.acquire_lease(session_id, "worker-b", ttl=30)
    state = store.load_state(session_id)

    with pytest.raises(VersionConflict):
        store.save_state_and_promote_staging(
            session_id,
            state,
            [assistant("from the superseded worker")],
            CheckpointMeta(step_id="step-1", step_count=1, stream_sequence=0),
            expected_version=stale,
        )
    assert contents(store, session_id) == []


def test_a_step_commit_releases_its_holders_lease_only(store, session_id):
    def commit(step: int, release_lease_of: str) -> None:
        store.save_state_and_promote_staging(
            session_id,
            store.load_state(session_id),
            [],
            CheckpointMeta(step_id=f"step-{step}", step_count=step, stream_sequence=0),
            release_lease_of=release_lease_of,
        )

    store.acquire_lease(session_id, "worker-a", ttl=30)
    commit(1, release_lease_of="worker-b")  # Not its lease: it stays.
    assert store.acquire_lease(session_id, "worker-b", ttl=30) is None

    commit(2, release_lease_of="worker-a")

    taken = store.acquire_lease(session_id, "worker-b", ttl=30)
    assert taken is not None
    assert not taken.taken_over


def test_leases_of_a_missing_session_raise(store):
    for call in (store.acquire_lease, store.renew_lease):
        with pytest.raises(SessionNotFound):
            call("missing", "worker-a", 30)
    with pytest.raises(SessionNotFound):
        store.release_lease("missing", "worker-a")


# Interrupt flags


def test_interrupt_flag_is_raised_read_and_lowered(store, session_id):
    assert store.check_interrupt_flag(session_id) is None

    store.set_interrupt_flag(session_id, "user_requested")
    flag = store.check_interrupt_flag(session_id)
    assert flag.reason == "user_requested"
    assert flag.set_at is not None
    assert store.load_state(session_id).interrupt_flag == flag

    store.set_interrupt_flag(session_id)
    assert store.check_interrupt_flag(session_id).reason is None

    store.clear_interrupt_flag(session_id)
    store.clear_interrupt_flag(session_id)
    assert store.check_interrupt_flag(session_id) is None
    assert store.load_state(session_id).interrupt_flag is None


def test_interrupt_flags_are_read_together(store, session_id):
    quiet = store.create_session(agent_type="assistant").session_id
    store.set_interrupt_flag(session_id, "stop")

    flags = store.check_interrupt_flags([session_id, quiet, "missing"])

    assert flags == {session_id: store.check_interrupt_flag(session_id)}
    assert flags[session_id].reason == "stop"
    assert store.check_interrupt_flags([]) == {}


def test_interrupt_flag_of_missing_session(store):
    assert store.check_interrupt_flag("nope") is None
    with pytest.raises(SessionNotFound):
        store.set_interrupt_flag("nope", "x")


# Sub-session refs


def test_sub_session_refs_are_added_once_and_updated(store, session_id):
    started = timezone.now()
    refs = [
        SubSessionRef(
            sub_session_id="child-1",
            agent_type="analyzer",
            parent_tool_call_id="call-1",
            started_at=started,
        ),
        SubSessionRef(
            sub_session_id="child-2",
            agent_type="critic",
            parent_tool_call_id="call-2",
            mode=SubSessionMode.PERSISTENT,
            name="critic",
            remote={"url": "https://elsewhere"},
            started_at=started + timedelta(seconds=1),
        ),
    ]
    store.add_sub_session_refs(session_id, refs)
    store.add_sub_session_refs(
        session_id,
        [SubSessionRef(sub_session_id="child-1", agent_type="changed", parent_tool_call_id="x")],
    )

    assert store.get_sub_session_refs(session_id) == refs

    completed = timezone.now()
    store.update_sub_session_ref(
        session_id,
        SubSessionRefUpdate(
            sub_session_id="child-1", status=SessionStatus.COMPLETED, completed_at=completed
        ),
    )
    first = store.get_sub_session_refs(session_id)[0]
    assert (first.status, first.completed_at) == (SessionStatus.COMPLETED, completed)


def test_updating_an_unknown_sub_session_raises(store, session_id):
    with pytest.raises(SubSessionRefNotFound) as caught:
        store.update_sub_session_ref(
            session_id, SubSessionRefUpdate(sub_session_id="ghost", status=SessionStatus.FAILED)
        )

    assert caught.value.details == {"session_id": session_id, "sub_session_id": "ghost"}


def test_sub_session_refs_of_missing_session_raise(store):
    with pytest.raises(SessionNotFound):
        store.add_sub_session_refs("nope", [])
    with pytest.raises(SessionNotFound):
        store.get_sub_session_refs("nope")


# Runs


def test_runs_take_consecutive_turns_and_report_the_latest(store, session_id):
    first = store.create_run(session_id, "run-1", metadata={"trigger": "start"})
    second = store.create_run(session_id)

    assert (first.turn, first.status, first.step_count) == (1, RunStatus.RUNNING, 0)
    assert first.metadata == {"trigger": "start"}
    assert second.turn == 2
    assert store.get_current_run(session_id) == second
    assert store.list_runs(session_id) == [first, second]


def test_update_run_status_records_completion(store, session_id):
    store.create_run(session_id, "run-1")

    failed = store.update_run_status("run-1", RunStatus.FAILED, step_count=3, error="LLM down")

    assert (failed.status, failed.step_count, failed.error) == (RunStatus.FAILED, 3, "LLM down")
    assert failed.completed_at is not None
    assert store.list_runs(session_id) == [failed]
    reopened = store.update_run_status("run-1", RunStatus.RUNNING)
    assert (reopened.completed_at, reopened.step_count) == (None, 3)


def test_a_suspended_run_is_not_completed_and_metadata_merges(store, session_id):
    store.create_run(session_id, "run-1", metadata={"fromSequence": 3})

    suspended = store.update_run_status("run-1", RunStatus.SUSPENDED, step_count=1)
    resumed = store.update_run_status(
        "run-1", RunStatus.RUNNING, metadata={"resumedFromSequence": 9}
    )

    assert (suspended.status, suspended.completed_at) == (RunStatus.SUSPENDED, None)
    assert resumed.metadata == {"fromSequence": 3, "resumedFromSequence": 9}
    assert store.get_current_run(session_id) == resumed


def test_duplicate_run_ids_and_turns_raise(store, session_id):
    store.create_run(session_id, "run-1", turn=1)

    with pytest.raises(RunAlreadyExists):
        store.create_run(session_id, "run-1", turn=2)
    with pytest.raises(RunAlreadyExists) as caught:
        store.create_run(session_id, "run-2", turn=1)

    assert caught.value.code == "run-exists"
    assert [run.run_id for run in store.list_runs(session_id)] == ["run-1"]


def test_run_operations_on_missing_things(store):
    assert store.get_current_run("nope") is None
    with pytest.raises(SessionNotFound):
        store.create_run("nope")
    with pytest.raises(SessionNotFound):
        store.list_runs("nope")
    with pytest.raises(RunNotFound) as caught:
        store.update_run_status("ghost", RunStatus.COMPLETED)
    assert caught.value.code == "run-not-found"


# Queued runs


def test_a_run_queues_only_while_one_is_running_and_is_taken_oldest_first(store, session_id):
    assert store.queue_run(session_id, "early", "Hi") is False
    store.create_run(session_id, "run-1")

    first = store.queue_run(session_id, "run-2", "Add 2")
    second = store.queue_run(session_id, "run-3", [{"role": "user", "content": "Add 3"}])

    assert (first, second) == (True, True)
    queued = store.list_queued_runs(session_id)
    assert [(q.run_id, q.session_id, q.input) for q in queued] == [
        ("run-2", session_id, "Add 2"),
        ("run-3", session_id, [{"role": "user", "content": "Add 3"}]),
    ]
    assert store.take_queued_run(session_id) == queued[0]
    assert store.list_queued_runs(session_id) == queued[1:]
    store.update_run_status("run-1", RunStatus.COMPLETED)
    assert store.queue_run(session_id, "late", "Hi") is False
    assert store.discard_queued_runs(session_id) == 1
    assert store.take_queued_run(session_id) is None


def test_queued_runs_go_with_their_session(store, session_id):
    store.create_run(session_id, "run-1")
    store.queue_run(session_id, "run-2", "Hi")

    store.delete_session(session_id)

    assert store.list_queued_runs(session_id) == []
    with pytest.raises(SessionNotFound):
        store.queue_run(session_id, "run-3", "Hi")


# Staging


def test_staged_changes_round_trip_and_restaging_replaces(store, session_id):
    change = StagedToolChange(
        tool_call_id="call-1",
        patches=[{"op": "replace", "path": "/count", "value": 2}],
        merge_ops=[
            ReplaceOp(key="count", value=2),
            AppendOp(key="log", items=["x"]),
            DeleteOp(key="t"),
        ],
    )
    store.stage_changes(session_id, "step-1", [change])
    store.stage_changes(
        session_id,
        "step-1",
        [dataclasses.replace(change, merge_ops=[ReplaceOp(key="count", value=3)])],
    )

    [staged] = store.get_staged_changes(session_id)

    assert (staged.step_id, staged.tool_call_id, staged.status) == (
        "step-1",
        "call-1",
        StagedChangeStatus.STAGED,
    )
    assert staged.merge_ops == [ReplaceOp(key="count", value=3)]
    assert staged.patches == change.patches
    assert staged.size_bytes == rules.staged_change_size(
        dataclasses.replace(change, merge_ops=[ReplaceOp(key="count", value=3)])
    )
    assert staged.checkpoint_id is None


def test_tool_calls_are_recorded_begun_then_finished_until_forgotten(store, session_id):
    outcome = {"result": {"sent": 5}, "isError": False, "ops": []}
    store.begin_tool_calls(session_id, "step-1", ["call-1", "call-2"])
    store.begin_tool_calls(session_id, "step-2", ["call-1"])

    assert store.finish_tool_call(session_id, "step-1", "call-1", outcome)
    store.begin_tool_calls(session_id, "step-1", ["call-1", "call-2"])  # Again: outcomes stay.
    assert not store.finish_tool_call(session_id, "step-1", "call-9", outcome)

    assert store.get_tool_calls(session_id, "step-1") == {
        "call-1": ToolCallRecord(tool_call_id="call-1", outcome=outcome),
        "call-2": ToolCallRecord(tool_call_id="call-2", outcome=None),
    }
    assert store.forget_tool_calls(session_id, "step-1") == 2
    assert store.get_tool_calls(session_id, "step-1") == {}
    assert list(store.get_tool_calls(session_id, "step-2")) == ["call-1"]
    for calls in (["call-1"], []):
        with pytest.raises(SessionNotFound):
            store.begin_tool_calls("missing", "step-1", calls)
    store.delete_session(session_id)
    assert store.get_tool_calls(session_id, "step-2") == {}


def test_a_call_staged_twice_in_one_batch_keeps_its_last_change(store, session_id):
    first, last = (
        StagedToolChange(tool_call_id=call_id, merge_ops=[ReplaceOp(key=call_id, value=value)])
        for call_id, value in (("call-1", 1), ("call-1", 2))
    )
    other = StagedToolChange(tool_call_id="call-2", merge_ops=[ReplaceOp(key="x", value=0)])

    store.stage_changes(session_id, "step-1", [first, other, last])

    staged = store.get_staged_changes(session_id)
    assert [(s.tool_call_id, s.merge_ops) for s in staged] == [
        ("call-1", last.merge_ops),
        ("call-2", other.merge_ops),
    ]


def test_promote_and_rollback_touch_only_staged_changes_of_the_step(store, session_id):
    store.stage_changes(
        session_id,
        "step-1",
        [StagedToolChange(tool_call_id="a"), StagedToolChange(tool_call_id="b")],
    )
    store.stage_changes(session_id, "step-2", [StagedToolChange(tool_call_id="c")])

    assert store.promote_staging(session_id, "step-1", "cp-1") == 2
    assert store.promote_staging(session_id, "step-1", "cp-2") == 0
    assert store.rollback_staging(session_id, "step-1") == 0
    assert store.rollback_staging(session_id, "step-2") == 1

    promoted = store.get_staged_changes(session_id, status=StagedChangeStatus.PROMOTED)
    assert {(c.tool_call_id, c.checkpoint_id) for c in promoted} == {("a", "cp-1"), ("b", "cp-1")}
    rolled_back = store.get_staged_changes(session_id, status=StagedChangeStatus.ROLLED_BACK)
    assert [c.tool_call_id for c in rolled_back] == ["c"]


def test_staging_over_the_size_limit_raises_with_details_and_stages_nothing(store_class, db):
    store = store_class(max_staged_changes_bytes=500)
    session_id = store.create_session(agent_type="assistant").session_id
    small = StagedToolChange(tool_call_id="ok", merge_ops=[ReplaceOp(key="flag", value=True)])
    big = StagedToolChange(
        tool_call_id="too-big",
        patches=[{"op": "add", "path": "/report~1draft", "value": "x" * 300}],
        merge_ops=[ReplaceOp(key="summary", value="y" * 300)],
    )

    with pytest.raises(StateSizeExceeded) as caught:
        store.stage_changes(session_id, "step-1", [small, big])

    error = caught.value
    assert error.code == "state-size-exceeded"
    assert (error.tool_call_id, error.limit) == ("too-big", 500)
    assert error.total_bytes == rules.staged_change_size(big) > 500
    assert error.changed_keys == ["report/draft", "summary"]
    assert error.details["changed_keys"] == ["report/draft", "summary"]
    assert store.get_staged_changes(session_id) == []


def test_default_staging_limit_is_1_8_mib(store, session_id):
    assert store.max_staged_changes_bytes == DEFAULT_MAX_STAGED_CHANGES_BYTES == 1_887_436
    overhead = rules.staged_change_size(
        StagedToolChange(tool_call_id="c", merge_ops=[ReplaceOp(key="blob", value="")])
    )
    fits = "x" * (DEFAULT_MAX_STAGED_CHANGES_BYTES - overhead)

    store.stage_changes(
        session_id,
        "step-1",
        [StagedToolChange(tool_call_id="c", merge_ops=[ReplaceOp(key="blob", value=fits)])],
    )
    with pytest.raises(StateSizeExceeded):
        store.stage_changes(
            session_id,
            "step-1",
            [
                StagedToolChange(
                    tool_call_id="d", merge_ops=[ReplaceOp(key="blob", value=fits + "x")]
                )
            ],
        )

    [staged] = store.get_staged_changes(session_id)
    assert staged.size_bytes == DEFAULT_MAX_STAGED_CHANGES_BYTES


def test_staging_on_missing_session_raises(store):
    with pytest.raises(SessionNotFound):
        store.stage_changes("nope", "step-1", [StagedToolChange(tool_call_id="a")])
    with pytest.raises(SessionNotFound):
        store.promote_staging("nope", "step-1", "cp")
    with pytest.raises(SessionNotFound):
        store.rollback_staging("nope", "step-1")
    with pytest.raises(SessionNotFound):
        store.get_staged_changes("nope")


# Checkpoints


def test_checkpoints_are_listed_newest_first_and_found_by_id(store, session_id):
    first = commit_step(store, session_id, step=1, messages=[user("a")])
    time.sleep(0.002)
    second = commit_step(store, session_id, step=2, messages=[assistant("b")])

    listed = store.list_checkpoints(session_id)
    assert [c.checkpoint_id for c in listed] == [second.checkpoint_id, first.checkpoint_id]
    assert [c.message_count for c in listed] == [2, 1]
    assert store.list_checkpoints(session_id, limit=1) == listed[:1]
    assert store.get_latest_checkpoint(session_id) == listed[0]
    assert store.get_checkpoint(session_id, first.checkpoint_id) == listed[1]


def test_a_checkpoint_keeps_the_timings_its_step_gave_it(store, session_id):
    timings = {"startedAt": "2026-11-25T10:00:00+00:00", "modelMs": 812, "tools": [{"ms": 3}]}
    state = store.load_state(session_id)
    state.step_count = 1
    timed = store.save_state_and_promote_staging(
        session_id,
        state,
        [],
        CheckpointMeta(step_id="step-1", step_count=1, stream_sequence=0, timings=timings),
        expected_version=state.version,
    )
    untimed = commit_step(store, session_id, step=2)

    assert store.get_checkpoint(session_id, timed.checkpoint_id).timings == timings
    assert store.get_checkpoint(session_id, untimed.checkpoint_id).timings is None


def test_checkpoint_reads_of_missing_things(store, session_id):
    other = store.create_session(agent_type="assistant").session_id
    result = commit_step(store, other, step=1)

    assert store.get_checkpoint(session_id, result.checkpoint_id) is None
    assert store.get_checkpoint(session_id, "ghost") is None
    assert store.get_latest_checkpoint(session_id) is None
    assert store.get_latest_checkpoint("nope") is None
    with pytest.raises(SessionNotFound):
        store.list_checkpoints("nope")


# Cross-session listing


@pytest.fixture
def catalogue(store, django_user_model):
    """Create six sessions, each created a little after the one before; return them by name."""
    owner = django_user_model.objects.create_user("owner")
    specs = {
        "alpha": {
            "agent_type": "researcher",
            "user_id": "u1",
            "tags": ["a", "b"],
            "metadata": {"team": "red"},
        },
        "beta": {
            "agent_type": "researcher",
            "user_id": "u2",
            "tags": ["a"],
            "metadata": {"team": "blue"},
        },
        "gamma": {
            "agent_type": "writer",
            "user_id": "u1",
            "tags": ["b", "c"],
            "owner_id": owner.pk,
        },
        "delta": {"agent_type": "writer", "tags": [], "metadata": {"team": "red", "tier": "gold"}},
        "epsilon": {"agent_type": "researcher", "parent_session_id": "alpha", "owner_id": owner.pk},
        "zeta": {"agent_type": "critic", "metadata": {"team": "redder"}},
    }
    sessions = {}
    for name, spec in specs.items():
        sessions[name] = store.create_session(name, **spec)
        time.sleep(0.002)
    store.update_status("beta", SessionStatus.COMPLETED)
    store.update_status("delta", SessionStatus.SUSPENDED_CLIENT_TOOL)
    sessions["owner_id"] = owner.pk
    return sessions


def names(page) -> list[str]:
    return [summary.session_id for summary in page.sessions]


def test_list_sessions_filters_by_each_field(store, catalogue):
    assert names(store.list_sessions(agent_type="researcher", order_by="created_at")) == [
        "alpha",
        "beta",
        "epsilon",
    ]
    assert names(store.list_sessions(user_id="u1", order_by="created_at")) == ["alpha", "gamma"]
    assert names(store.list_sessions(owner_id=catalogue["owner_id"], order_by="created_at")) == [
        "gamma",
        "epsilon",
    ]
    assert names(store.list_sessions(status=SessionStatus.COMPLETED)) == ["beta"]
    assert names(
        store.list_sessions(
            status=[SessionStatus.COMPLETED, SessionStatus.SUSPENDED_CLIENT_TOOL],
            order_by="created_at",
        )
    ) == ["beta", "delta"]
    assert names(store.list_sessions(parent_session_id="alpha")) == ["epsilon"]


def test_list_sessions_tags_must_all_be_present(store, catalogue):
    assert names(store.list_sessions(tags=["a"], order_by="created_at")) == ["alpha", "beta"]
    assert names(store.list_sessions(tags=["a", "b"])) == ["alpha"]
    assert names(store.list_sessions(tags=["b"], order_by="created_at")) == ["alpha", "gamma"]
    assert names(store.list_sessions(tags=["a", "c"])) == []


def test_list_sessions_metadata_matches_every_pair_exactly(store, catalogue):
    assert names(store.list_sessions(metadata={"team": "red"}, order_by="created_at")) == [
        "alpha",
        "delta",
    ]
    assert names(store.list_sessions(metadata={"team": "red", "tier": "gold"})) == ["delta"]
    assert names(store.list_sessions(metadata={"tier": "silver"})) == []


def test_list_sessions_time_ranges_are_exclusive(store, catalogue):
    created = {name: catalogue[name].created_at for name in ("alpha", "gamma", "epsilon")}

    between = store.list_sessions(
        created_after=created["alpha"], created_before=created["epsilon"], order_by="created_at"
    )
    assert names(between) == ["beta", "gamma", "delta"]

    time.sleep(0.002)
    marker = timezone.now()
    time.sleep(0.002)
    store.increment_step_count("gamma")
    assert names(store.list_sessions(updated_after=marker)) == ["gamma"]
    assert "gamma" not in names(store.list_sessions(updated_before=marker))


def test_list_sessions_combines_filters(store, catalogue):
    page = store.list_sessions(
        agent_type="researcher", user_id="u1", tags=["a"], status=SessionStatus.ACTIVE
    )

    assert names(page) == ["alpha"]


def test_list_sessions_orders_and_paginates(store, catalogue):
    everyone = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"]
    assert names(store.list_sessions(order_by="created_at")) == everyone
    assert names(store.list_sessions()) == everyone[::-1]

    pages = [
        store.list_sessions(order_by="created_at", offset=offset, limit=4) for offset in (0, 4, 8)
    ]

    assert [names(page) for page in pages] == [everyone[:4], everyone[4:], []]
    assert [(page.total, page.offset, page.limit, page.has_more) for page in pages] == [
        (6, 0, 4, True),
        (6, 4, 4, False),
        (6, 8, 4, False),
    ]
    store.increment_step_count("beta")
    assert names(store.list_sessions(order_by="-updated_at", limit=1)) == ["beta"]


def test_list_sessions_summaries_carry_listing_fields(store, catalogue):
    store.append_messages("alpha", [user("hi"), assistant("hello")])

    [alpha] = store.list_sessions(tags=["a", "b"]).sessions

    assert (alpha.session_id, alpha.agent_type, alpha.status) == (
        "alpha",
        "researcher",
        SessionStatus.ACTIVE,
    )
    assert (alpha.message_count, alpha.step_count, alpha.version) == (2, 0, 1)
    assert (alpha.user_id, alpha.tags, alpha.metadata) == ("u1", ["a", "b"], {"team": "red"})
    assert alpha.created_at == catalogue["alpha"].created_at
    assert not hasattr(alpha, "custom_state")


def test_list_sessions_finds_expired_sessions(store):
    now = timezone.now()
    store.create_session("past", agent_type="a", expires_at=now - timedelta(minutes=1))
    store.create_session("exactly", agent_type="a", expires_at=now)
    store.create_session("future", agent_type="a", expires_at=now + timedelta(minutes=1))
    store.create_session("never", agent_type="a")

    assert names(store.list_sessions(expired_by=now, order_by="expires_at")) == ["past", "exactly"]


def test_list_expired_sessions_walks_a_cursor_in_expiry_order(store):
    now = timezone.now()
    tie = now - timedelta(minutes=5)
    for session_id, expires_at in [
        ("b-tie", tie),
        ("oldest", now - timedelta(hours=1)),
        ("a-tie", tie),
        ("exactly-now", now),
        ("future", now + timedelta(minutes=1)),
    ]:
        store.create_session(session_id, agent_type="a", expires_at=expires_at)
    store.create_session("finished", agent_type="a", expires_at=now - timedelta(hours=2))
    store.update_status("finished", SessionStatus.COMPLETED)

    walked, cursor = [], None
    while batch := store.list_expired_sessions(now, after=cursor, limit=2):
        walked += [summary.session_id for summary in batch]
        cursor = (batch[-1].expires_at, batch[-1].session_id)

    assert walked == ["oldest", "a-tie", "b-tie", "exactly-now"]
    completed = store.list_expired_sessions(now, statuses=[SessionStatus.COMPLETED])
    assert [summary.session_id for summary in completed] == ["finished"]


def test_list_expired_sessions_cursor_ignores_sessions_that_left(store):
    now = timezone.now()
    for n in range(4):
        store.create_session(f"s{n}", agent_type="a", expires_at=now - timedelta(minutes=10 - n))
    first = store.list_expired_sessions(now, limit=2)
    store.update_status("s0", SessionStatus.FAILED)
    store.update_status("s2", SessionStatus.FAILED)

    rest = store.list_expired_sessions(now, after=(first[-1].expires_at, first[-1].session_id))

    assert [summary.session_id for summary in first] == ["s0", "s1"]
    assert [summary.session_id for summary in rest] == ["s3"]


@pytest.mark.parametrize(
    "arguments",
    [
        {"offset": -1},
        {"limit": 0},
        {"limit": 1001},
        {"order_by": "agent_type"},
        {"status": "sleeping"},
    ],
)
def test_list_sessions_rejects_bad_arguments(store, arguments):
    with pytest.raises(ValueError, match=r"offset|limit|order_by|sleeping"):
        store.list_sessions(**arguments)
