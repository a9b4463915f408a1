"""PostgreSQL-only index tuning.

Adds GIN indexes for the tag and metadata containment filters (`tags__superset` and
`metadata__superset` compile to `@>`, which they serve; SQLite has no GIN and embedded
deployments are small enough to scan). Drops the `varchar_pattern_ops` twins Django adds to the
message id and parent columns: nothing searches message ids with LIKE, and every append would
pay for them.
"""

from django.db import migrations

GIN_INDEXES = {"session_tags_gin": "tags", "session_metadata_gin": "metadata"}


def tune_indexes(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    sessions = apps.get_model("sessions_app", "AgentSession")._meta.db_table
    for name, column in GIN_INDEXES.items():
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS {name} ON {sessions} USING gin ({column} jsonb_path_ops)"
        )
    messages = apps.get_model("sessions_app", "Message")._meta.db_table
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = %s "
            "AND indexdef LIKE '%%varchar_pattern_ops%%'",
            [messages],
        )
        for (name,) in cursor.fetchall():
            schema_editor.execute(f'DROP INDEX IF EXISTS "{name}"')


def drop_gin_indexes(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for name in GIN_INDEXES:
        schema_editor.execute(f"DROP INDEX IF EXISTS {name}")


class Migration(migrations.Migration):
    dependencies = [("sessions_app", "0001_initial")]

    operations = [migrations.RunPython(tune_indexes, drop_gin_indexes, elidable=False)]
