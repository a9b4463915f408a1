"""Full-text search over message content: English stemming on both databases.

PostgreSQL: a stored generated `tsvector` column (English configuration) with a GIN index.
SQLite: an FTS5 table of each message's stems (`sessions_app.stores.search.search_text`), keyed
by the message table's rowids and kept in step by triggers. (`VACUUM` may renumber those rowids:
after one, refill the table, `DELETE FROM sessions_app_message_fts` then the `INSERT ... SELECT`
below.)
The model does not declare either: `sessions_app.stores.search` queries them.
"""

from django.db import migrations

POSTGRES = [
    "ALTER TABLE sessions_app_message ADD COLUMN search_vector tsvector "
    "GENERATED ALWAYS AS (to_tsvector('english', content)) STORED",
    "CREATE INDEX message_search ON sessions_app_message USING gin (search_vector)",
]
POSTGRES_REVERSE = ["ALTER TABLE sessions_app_message DROP COLUMN search_vector"]
SQLITE = [
    "CREATE VIRTUAL TABLE sessions_app_message_fts USING fts5(content, tokenize='unicode61')",
    "INSERT INTO sessions_app_message_fts(rowid, content) "
    "SELECT rowid, search_text(content) FROM sessions_app_message",
    "CREATE TRIGGER message_fts_insert AFTER INSERT ON sessions_app_message BEGIN "
    "INSERT INTO sessions_app_message_fts(rowid, content) "
    "VALUES (new.rowid, search_text(new.content)); END",
    "CREATE TRIGGER message_fts_delete AFTER DELETE ON sessions_app_message BEGIN "
    "DELETE FROM sessions_app_message_fts WHERE rowid = old.rowid; END",
    "CREATE TRIGGER message_fts_update AFTER UPDATE OF content ON sessions_app_message BEGIN "
    "UPDATE sessions_app_message_fts SET content = search_text(new.content) "
    "WHERE rowid = old.rowid; END",
]
SQLITE_REVERSE = [
    "DROP TRIGGER message_fts_update",
    "DROP TRIGGER message_fts_delete",
    "DROP TRIGGER message_fts_insert",
    "DROP TABLE sessions_app_message_fts",
]


def _run(statements: dict[str, list[str]]):
    def run(apps, schema_editor):
        for statement in statements.get(schema_editor.connection.vendor, []):
            schema_editor.execute(statement)

    return run


class Migration(migrations.Migration):
    dependencies = [("sessions_app", "0005_run_suspended_status")]

    operations = [
        migrations.RunPython(
            _run({"postgresql": POSTGRES, "sqlite": SQLITE}),
            _run({"postgresql": POSTGRES_REVERSE, "sqlite": SQLITE_REVERSE}),
        ),
    ]
