"""Index only a message's first 100,000 characters on PostgreSQL (`SEARCHED_LENGTH`).

A `tsvector` holds at most 1 MiB, so a longer message (a large tool result, say) could not be
stored at all while its whole content was indexed. SQLite's `search_text` cuts at the same place.
"""

from django.db import migrations

POSTGRES = [
    "ALTER TABLE sessions_app_message DROP COLUMN search_vector",
    "ALTER TABLE sessions_app_message ADD COLUMN search_vector tsvector "
    "GENERATED ALWAYS AS (to_tsvector('english', left(content, 100000))) STORED",
    "CREATE INDEX message_search ON sessions_app_message USING gin (search_vector)",
]
POSTGRES_REVERSE = [
    "ALTER TABLE sessions_app_message DROP COLUMN search_vector",
    "ALTER TABLE sessions_app_message ADD COLUMN search_vector tsvector "
    "GENERATED ALWAYS AS (to_tsvector('english', content)) STORED",
    "CREATE INDEX message_search ON sessions_app_message USING gin (search_vector)",
]


def _run(statements: list[str]):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            for statement in statements:
                schema_editor.execute(statement)

    return run


class Migration(migrations.Migration):
    dependencies = [("sessions_app", "0008_context_blocks")]

    operations = [migrations.RunPython(_run(POSTGRES), _run(POSTGRES_REVERSE))]
