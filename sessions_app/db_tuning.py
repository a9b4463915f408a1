"""PostgreSQL tuning that migrations apply to the tables written on every step."""

from django.db import migrations


def room_for_hot_updates(app_label: str, model_name: str, fillfactor: int) -> migrations.RunPython:
    """Return the operation leaving `100 - fillfactor` percent of the table's pages free.

    A row updated without changing an indexed column stays on its page if there is room
    (a heap-only, HOT, update) and writes no index entry; on pages packed full it moves and
    writes one in every index. The `varchar_pattern_ops` twin Django adds to a character
    primary key goes too (`without_pattern_twin`). SQLite is left as it is.
    """

    def make_room(apps, schema_editor) -> None:
        if schema_editor.connection.vendor != "postgresql":
            return
        name = _table(apps, app_label, model_name)
        schema_editor.execute(f"ALTER TABLE {name} SET (fillfactor = {fillfactor})")
        _drop_pattern_twin(schema_editor, name)

    def pack_pages(apps, schema_editor) -> None:
        if schema_editor.connection.vendor == "postgresql":
            name = _table(apps, app_label, model_name)
            schema_editor.execute(f"ALTER TABLE {name} RESET (fillfactor)")

    return migrations.RunPython(make_room, pack_pages, elidable=False)


def without_pattern_twin(app_label: str, model_name: str) -> migrations.RunPython:
    """Return the operation dropping the `varchar_pattern_ops` twin of the table's character
    primary key: an index entry more on every insert, for prefix matches no one makes (ids
    are only ever matched whole). Going back leaves it dropped. SQLite has none."""

    def drop(apps, schema_editor) -> None:
        if schema_editor.connection.vendor == "postgresql":
            _drop_pattern_twin(schema_editor, _table(apps, app_label, model_name))

    return migrations.RunPython(drop, migrations.RunPython.noop, elidable=False)


def _table(apps, app_label: str, model_name: str) -> str:
    return apps.get_model(app_label, model_name)._meta.db_table


def _drop_pattern_twin(schema_editor, table: str) -> None:
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = %s "
            "AND indexdef LIKE '%%(id varchar_pattern_ops)%%'",
            [table],
        )
        for (index,) in cursor.fetchall():
            schema_editor.execute(f'DROP INDEX IF EXISTS "{index}"')
