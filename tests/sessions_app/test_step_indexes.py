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


def indexed_columns(model) -> dict[str, str]:
    """Return the model's table's indexes by name, each as the part of its definition that
    lists what it holds."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s",
            [model._meta.db_table],
        )
        return {name: definition.partition(" USING ")[2] for name, definition in cursor}


def test_chunks_are_indexed_by_id_and_by_stream_and_sequence_only():
    assert sorted(indexed_columns(StreamChunk).values()) == [
        "btree (id)",
        "btree (stream_id, sequence)",
    ]


@pytest.mark.parametrize("model", [Checkpoint, Run])
def test_checkpoint_and_run_ids_have_no_index_for_prefix_matches(model):
    held = indexed_columns(model).values()

    assert "btree (id)" in held
    assert not [definition for definition in held if "varchar_pattern_ops" in definition]
