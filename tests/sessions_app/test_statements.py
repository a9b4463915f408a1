"""The store's written-out statements: those the ORM can express are exactly what it compiles
for the same queries; the others return what the store reads from them."""

import pytest
from django.db import connection, transaction

from sessions_app import models
from sessions_app.stores.statements import CHECKPOINT_COLUMNS, statements

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


def test_the_commit_lock_reads_the_session_and_its_last_message():
    session = models.AgentSession.objects.create(agent_type="assistant", lease_holder="w")
    lock = statements(connection.vendor).lock_for_commit

    def locked() -> tuple:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(lock, [session.pk, session.pk])
            return cursor.fetchone()

    assert locked() == (session.version, 0, "w", None, None)
    for sequence in (1, 2):
        models.Message.objects.create(
            id=f"m{sequence}", session=session, sequence=sequence, role="user"
        )
    session.message_count = 2
    session.save(update_fields=["message_count"])
    assert locked() == (session.version, 2, "w", "m2", 2)


def test_checkpoint_columns_follow_the_model():
    fields = [field.name for field in models.Checkpoint._meta.concrete_fields]
    assert list(CHECKPOINT_COLUMNS) == fields
    assert models.Checkpoint().pk  # Ids are made in Python: the INSERT returns nothing.
