"""A JSON containment lookup that works on PostgreSQL and SQLite alike.

`tags__superset=["a", "b"]` matches rows whose tag list holds both strings; `metadata__superset=
{"k": "v"}` matches rows whose metadata maps every given key to the given value. PostgreSQL runs
Django's own `@>` (served by the GIN indexes of migration 0002); SQLite, where Django offers no
JSON containment, runs the same test over `json_each`.
"""

from django.db.models.fields.json import DataContains


class JSONSuperset(DataContains):
    lookup_name = "superset"

    def as_sqlite(self, compiler, connection):
        lhs, lhs_params = self.process_lhs(compiler, connection)
        rhs, rhs_params = self.process_rhs(compiler, connection)
        if isinstance(self.rhs, dict):
            held = "held.key = wanted.key AND held.value = wanted.value"
        else:
            held = "held.value = wanted.value"
        sql = (
            f"NOT EXISTS (SELECT 1 FROM json_each({rhs}) AS wanted WHERE NOT EXISTS "
            f"(SELECT 1 FROM json_each({lhs}) AS held WHERE {held}))"
        )
        return sql, (*rhs_params, *lhs_params)
