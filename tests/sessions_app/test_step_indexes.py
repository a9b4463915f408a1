"""On PostgreSQL, the rows every step inserts write only the index entries that reads use.

A step appends its chunks (a model's every delta is one) and inserts a checkpoint; a run
inserts its row. Each index on those tables costs every such insert an entry: a chunk's steps
and the ids' prefix matches (the `varchar_pattern_ops` twin Django gives a character primary
key) are read by no query worth that (`sessions_app.db_tuning`, the migrations that drop them).
"""

import pytest
from django.db import connection

from sessions_app.models import Checkpoint, Run
from streams_app.models import StreamChunk

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


def indexes(model) -> list[str]:
    """Return what the model's table's indexes hold (each definition from its method on)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexdef FROM pg_indexes WHERE tablename = %s", [model._meta.db_table]
        )
        return sorted(definition.partition(" USING ")[2] for (definition,) in cursor)


def test_chunks_are_indexed_by_id_and_by_stream_and_sequence_only():
    assert indexes(StreamChunk) == ["btree (id)", "btree (stream_id, sequence)"]


@pytest.mark.parametrize("model", [Checkpoint, Run])
def test_checkpoint_and_run_ids_have_no_index_for_prefix_matches(model):
    held = indexes(model)

    assert "btree (id)" in held
    assert not [definition for definition in held if "varchar_pattern_ops" in definition]
