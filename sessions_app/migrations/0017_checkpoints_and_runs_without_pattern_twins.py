"""PostgreSQL-only: checkpoints and runs lose the `varchar_pattern_ops` twin of their ids.

Every step inserts a checkpoint and every run a run row: each wrote an entry in an index for
prefix matches of ids, which no query makes (`sessions_app.db_tuning`).
"""

from django.db import migrations

from sessions_app.db_tuning import without_pattern_twin


class Migration(migrations.Migration):
    dependencies = [("sessions_app", "0016_session_history_revision")]

    operations = [
        without_pattern_twin("sessions_app", "Checkpoint"),
        without_pattern_twin("sessions_app", "Run"),
    ]
