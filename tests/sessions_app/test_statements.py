"""The store's written-out statements: those the ORM can express are exactly what it compiles
for the same queries; the others return what the store reads from them, in one round trip."""

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from sessions_app import models
from sessions_app.errors import (
    RunAlreadyExists,
    RunNotFound,
    SessionAlreadyExists,
    SessionNotFound,
)
from sessions_app.stores.orm import _COLUMN_NAMES, ORMSessionStateStore, _fetch_named
from sessions_app.stores.statements import CHECKPOINT_COLUMNS, statements
from sessions_app.stores.types import (
    CheckpointMeta,
    Message,
    MessageRole,
    RunStatus,
    StagedChangeStatus,
    StagedToolChange,
)

pytestmark = pytest.mark.django_db


def compiled_by_orm(run) -> list[str]:
    """Return the SQL text of every statement `run` sends, before parameters are bound."""
    sent: list[str] = []

    def record(execute, sql, params, many, context):
        sent.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record), transaction.atomic(savepoint=False):
        run()
    return sent


def test_each_statement_matches_the_orm_on_this_database():
    session = models.AgentSession.objects.create(agent_type="assistant")
    sql = statements(connection.vendor)

    def last_message():
        latest = models.Message.objects.filter(session_id=session.pk).order_by("-sequence")
        list(latest.values("id", "sequence")[:1])

    def insert_checkpoint():
        models.Checkpoint.objects.create(
            session=session, step_id="s", step_count=1, message_count=0, stream_sequence=0, state={}
        )

    def promote_staged():
        staged = models.StagedChange.objects.filter(
            session_id=session.pk, step_id="s", status=models.StagedChange.Status.STAGED
        )
        staged.update(status=models.StagedChange.Status.PROMOTED, checkpoint_id="c")

    assert compiled_by_orm(last_message) == [sql.last_message]
    assert compiled_by_orm(insert_checkpoint) == [sql.insert_checkpoint]
    assert compiled_by_orm(promote_staged) == [sql.promote_staged]


def test_the_commit_lock_reads_the_session_its_interrupt_flag_and_its_last_message():
    session = models.AgentSession.objects.create(agent_type="assistant", lease_holder="w")
    lock = statements(connection.vendor).lock_for_commit

    def locked() -> tuple:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(lock, [session.pk, session.pk])
            return cursor.fetchone()

    assert locked() == (session.version, 0, "w", 0, None, None, None, None)
    for sequence in (1, 2):
        models.Message.objects.create(
            id=f"m{sequence}", session=session, sequence=sequence, role="user"
        )
    session.message_count, session.history_revision = 2, 3
    session.save(update_fields=["message_count", "history_revision"])
    models.InterruptFlag.objects.create(session=session, reason="Stop.")
    version, count, holder, revision, reason, set_at, *last = locked()
    assert (version, count, holder, revision, reason, *last) == (
        session.version,
        2,
        "w",
        3,
        "Stop.",
        "m2",
        2,
    )
    assert set_at is not None


def test_checkpoint_columns_follow_the_model():
    fields = [field.name for field in models.Checkpoint._meta.concrete_fields]
    assert list(CHECKPOINT_COLUMNS) == fields
    assert models.Checkpoint().pk  # Ids are made in Python: the INSERT returns nothing.


@pytest.mark.postgres
def test_a_step_commit_promotes_what_its_step_staged_as_it_inserts_its_checkpoint():
    store = ORMSessionStateStore()
    session_id = store.create_session(agent_type="assistant").session_id
    store.stage_changes(session_id, "step-1", [StagedToolChange(tool_call_id="call-1")])
    state = store.load_state(session_id)

    with CaptureQueriesContext(connection) as committing:
        result = store.save_state_and_promote_staging(
            session_id,
            state,
            [],
            CheckpointMeta(step_id="step-1", step_count=1, stream_sequence=0),
            expected_version=state.version,
            stage=[StagedToolChange(tool_call_id="call-2")],
        )

    staged_table = models.StagedChange._meta.db_table
    touching = [q["sql"] for q in committing.captured_queries if staged_table in q["sql"]]
    promoting, staging = touching  # The promotion, then the commit's own change.
    checkpoints = models.Checkpoint._meta.db_table
    assert (promoting.startswith("WITH"), checkpoints in promoting) == (True, True)
    assert (staging.startswith("INSERT"), checkpoints in staging) == (True, False)
    assert sorted(
        (change.tool_call_id, change.status, change.checkpoint_id)
        for change in store.get_staged_changes(session_id, step_id="step-1")
    ) == [
        ("call-1", StagedChangeStatus.PROMOTED, result.checkpoint_id),
        ("call-2", StagedChangeStatus.PROMOTED, result.checkpoint_id),
    ]


@pytest.mark.postgres
def test_a_run_s_end_sets_its_status_and_takes_a_queued_run_in_one_statement_each():
    store = ORMSessionStateStore()
    session = models.AgentSession.objects.create(agent_type="assistant")
    store.create_run(session.pk, "run-1", metadata={"firstStep": 1})
    for run_id, run_input in (("run-2", {"message": "next"}), ("run-3", "later")):
        assert store.queue_run(session.pk, run_id, run_input)

    with CaptureQueriesContext(connection) as ending:
        ended = store.update_run_status(
            "run-1", RunStatus.COMPLETED, step_count=2, metadata={"tokens": [2, 3]}
        )
        taken = store.take_queued_run(session.pk)

    assert len(ending) == 2
    assert ended == store.list_runs(session.pk)[0]  # What the store reads of it afterwards.
    assert (ended.status, ended.step_count, ended.error) == (RunStatus.COMPLETED, 2, None)
    assert ended.metadata == {"firstStep": 1, "tokens": [2, 3]}
    assert ended.completed_at >= ended.started_at
    assert (taken.run_id, taken.session_id, taken.input) == (
        "run-2",
        session.pk,
        {"message": "next"},
    )
    assert [queued.run_id for queued in store.list_queued_runs(session.pk)] == ["run-3"]
    reopened = store.update_run_status("run-1", RunStatus.RUNNING)  # Keeps what it is not given.
    assert (reopened.step_count, reopened.metadata, reopened.completed_at) == (
        2,
        ended.metadata,
        None,
    )
    with pytest.raises(RunNotFound):
        store.update_run_status("run-9", RunStatus.COMPLETED)
    assert store.take_queued_run("no-such-session") is None


@pytest.mark.postgres
def test_a_start_reads_the_session_and_its_run_and_creates_a_run_in_written_out_statements():
    store = ORMSessionStateStore()
    session = models.AgentSession.objects.create(agent_type="assistant", metadata={"team": "a"})
    store.set_interrupt_flag(session.pk, "Stop.")

    with CaptureQueriesContext(connection) as starting:
        state = store.load_state(session.pk)
        before = store.get_current_run(session.pk)
        created = store.create_run(session.pk, "run-1", metadata={"firstStep": 1})
        store.clear_interrupt_flag(session.pk)

    assert len(starting) == 5  # The run's creation locks its session first.
    assert (state.session_id, state.metadata) == (session.pk, {"team": "a"})
    assert state.interrupt_flag.reason == "Stop."
    assert state.interrupt_flag.set_at.tzinfo is not None
    assert before is None
    assert created == store.get_current_run(session.pk) == store.list_runs(session.pk)[0]
    assert (created.turn, created.status, created.metadata) == (
        1,
        RunStatus.RUNNING,
        {"firstStep": 1},
    )
    assert store.load_state(session.pk).interrupt_flag is None
    assert store.create_run(session.pk, "run-2").turn == 2
    with pytest.raises(RunAlreadyExists):
        store.create_run(session.pk, "run-2")
    with pytest.raises(RunAlreadyExists):
        store.create_run(session.pk, "run-3", turn=1)
    with pytest.raises(SessionNotFound):
        store.create_run("no-such-session", "run-4")
    assert [run.run_id for run in store.list_runs(session.pk)] == ["run-1", "run-2"]


@pytest.mark.postgres
def test_a_run_recorded_under_the_sessions_lock_is_one_statement():
    """A start commits the session's state first, which locks it: its run needs no lock."""
    store = ORMSessionStateStore()
    session = store.create_session(agent_type="assistant")
    store.create_run(session.session_id, "run-1")

    with transaction.atomic():
        store.save_state(session.session_id, session, expected_version=session.version)
        with CaptureQueriesContext(connection) as recording:
            created = store.create_run(session.session_id, "run-2", session_locked=True)

    assert [query["sql"].split()[0] for query in recording] == ["INSERT"]
    assert created == store.get_current_run(session.session_id)
    assert created.turn == 2


def test_creating_a_session_reads_nothing_back():
    """A new session has no interrupt flag to look for."""
    with CaptureQueriesContext(connection) as creating:
        created = ORMSessionStateStore().create_session(agent_type="assistant")

    assert not [q["sql"] for q in creating if q["sql"].startswith("SELECT")]
    assert created.interrupt_flag is None


def test_a_session_created_in_a_transaction_is_one_insert_without_a_savepoint():
    """A run's start creates its session in its own transaction; a taken id writes nothing."""
    store = ORMSessionStateStore()
    with transaction.atomic(), CaptureQueriesContext(connection) as creating:
        created = store.create_session("s-1", agent_type="assistant", tags=["a"])

    (insert,) = [query["sql"] for query in creating]
    assert insert.startswith("INSERT")
    assert store.load_state("s-1") == created
    with transaction.atomic():
        with CaptureQueriesContext(connection) as refusing, pytest.raises(SessionAlreadyExists):
            store.create_session("s-1", agent_type="other")
        store.create_session("s-2", agent_type="assistant")  # The transaction goes on.
    assert len(refusing) == 1
    assert store.load_state("s-1").agent_type == "assistant"
    assert store.session_exists("s-2")


def test_a_history_read_looks_for_compactions_only_where_the_session_has_some():
    """The path's statement says whether the session has compactions: a session without any
    (most) costs one statement a read."""
    store = ORMSessionStateStore()
    session_id = store.create_session(agent_type="assistant").session_id
    messages = [Message(role=MessageRole.USER, content=f"m{n}", id=f"m{n}") for n in range(3)]
    store.append_messages(session_id, messages)

    with CaptureQueriesContext(connection) as plain:
        history = store.get_history(session_id)
    compaction = store.add_compaction(session_id, "Summary", "m0", "m1")
    with CaptureQueriesContext(connection) as compacted:
        overlaid = store.get_history(session_id, chunk_size=1)  # The flag rides every chunk.

    assert len(plain) == 1
    assert [m.content for m in history] == ["m0", "m1", "m2"]
    assert len(compacted) == 3 + 1  # A statement per message, then the compactions.
    assert [m.id for m in overlaid] == [f"compaction_{compaction.compaction_id}", "m2"]


def test_a_named_read_follows_its_statement_when_a_migration_adds_a_column():
    """The names are kept from a statement's first run, and read again for a row that no
    longer fits them."""
    sql = "SELECT * FROM helix_test_named"
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE helix_test_named (a integer)")
        cursor.execute("INSERT INTO helix_test_named VALUES (1)")

    assert _fetch_named(sql, []) == {"a": 1}
    assert _COLUMN_NAMES[sql] == ("a",)  # Kept for the statement's next runs.
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE helix_test_named ADD COLUMN b integer DEFAULT 2")
    assert _fetch_named(sql, []) == {"a": 1, "b": 2}
    assert _COLUMN_NAMES[sql] == ("a", "b")
    assert _fetch_named(sql + " WHERE a = 0", []) is None


def test_the_interrupt_flags_of_many_sessions_are_one_statement():
    """The watcher reads its steps' flags at every beat; on PostgreSQL the statement is the
    same whatever their number (one prepared statement)."""
    store = ORMSessionStateStore()
    flagged, quiet = (store.create_session(agent_type="assistant").session_id for _ in range(2))
    store.set_interrupt_flag(flagged, "Stop.")

    read: list[dict] = []

    def read_twice() -> None:
        read.append(store.check_interrupt_flags([quiet]))
        read.append(store.check_interrupt_flags([flagged, quiet, "missing"]))

    sent = compiled_by_orm(read_twice)  # The statements' text, before parameters are bound.

    flags = read[1]
    assert read[0] == {}
    assert len(sent) == 2
    assert (sent[0] == sent[1]) == (connection.vendor == "postgresql")  # SQLite: one per count.
    assert list(flags) == [flagged]
    assert (flags[flagged].reason, flags[flagged].set_at.tzinfo is not None) == ("Stop.", True)
