"""PostgreSQL tuning that migrations apply to the tables written on every step."""

from django.db import migrations


def room_for_hot_updates(app_label: str, model_name: str, fillfactor: int) -> migrations.RunPython:
    """Return the operation leaving `100 - fillfactor` percent of the table's pages free.

    A row updated without changing an indexed column stays on its page if there is room
    (a heap-only, HOT, update) and writes no index entry; on pages packed full it moves and
    writes one in every index. The `varchar_pattern_ops` twin Django adds to a character
    primary key goes too: ids are only ever matched whole. SQLite is left as it is.
    """

    def table(apps) -> str:
        return apps.get_model(app_label, model_name)._meta.db_table

    def make_room(apps, schema_editor) -> None:
        if schema_editor.connection.vendor != "postgresql":
            return
        name = table(apps)
        schema_editor.execute(f"ALTER TABLE {name} SET (fillfactor = {fillfactor})")
        with schema_editor.connection.cursor() as cursor:
            cursor.execute(
                "SELECT indexname FROM pg_indexes WHERE tablename = %s "
                "AND indexdef LIKE '%%(id varchar_pattern_ops)%%'",
                [name],
            )
            for (index,) in cursor.fetchall():
                schema_editor.execute(f'DROP INDEX IF EXISTS "{index}"')

    def pack_pages(apps, schema_editor) -> None:
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(f"ALTER TABLE {table(apps)} RESET (fillfactor)")

    return migrations.RunPython(make_room, pack_pages, elidable=False)
