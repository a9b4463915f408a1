"""PostgreSQL-only: room on the streams' pages for heap-only (HOT) updates.

Each batch of chunks a writer appends bumps its stream's `last_sequence` and `chunk_count`,
columns no index holds: updates that stay on their page when it has room
(`sessions_app.db_tuning`). A stream's row is small; half of each page is left free.
"""

from django.db import migrations

from sessions_app.db_tuning import room_for_hot_updates


class Migration(migrations.Migration):
    dependencies = [("streams_app", "0002_stream_writer_epoch")]

    operations = [room_for_hot_updates("streams_app", "Stream", fillfactor=50)]
