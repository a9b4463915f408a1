"""Values as the written-out statements send them: what Django's own conversion sends, for every
field of the apps' models and values of every kind the converters take a shorter way for."""

import datetime
import decimal
import uuid

import pytest
from django.apps import apps
from django.core.exceptions import ValidationError
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import Field
from django.utils import timezone

from sessions_app import models
from sessions_app.stores.values import converter, new_row

FIELDS = [
    field
    for label in ("sessions_app", "streams_app", "agents_app")
    for model in apps.get_app_config(label).get_models()
    for field in model._meta.concrete_fields
]
AWARE = timezone.now()
VALUES = [
    "",
    "text",
    "0",
    models.Message.Role.USER,
    0,
    7,
    -3,
    2**40,
    True,
    False,
    None,
    {},
    {"a": [1, "b", None]},
    [],
    [{"x": 1.5}],
    1.25,
    decimal.Decimal("2.5"),
    AWARE,
    AWARE.astimezone(datetime.timezone(datetime.timedelta(hours=5))),
    uuid.UUID(int=1),
]

# What Django's conversion raises for a value its field cannot hold.
REFUSALS = (TypeError, ValueError, ValidationError, decimal.InvalidOperation)


def sent(value):
    """Return what a converted value sends: adapters' wrappers compared by what they hold."""
    if hasattr(value, "obj"):  # psycopg's Json and Jsonb
        return type(value), value.obj
    return type(value), value


def django_conversion(field, value, database):
    try:
        return sent(field.get_db_prep_save(value, database))
    except REFUSALS as error:
        return type(error)


@pytest.mark.parametrize("field", FIELDS, ids=lambda field: f"{field.model.__name__}.{field.name}")
def test_each_field_converts_values_as_django_does(field):
    database = connections[DEFAULT_DB_ALIAS]
    convert = converter(field)
    for value in VALUES:
        expected = django_conversion(field, value, database)
        try:
            got = sent(convert(value, database))
        except REFUSALS as error:
            got = type(error)
        assert got == expected, (field, value)


def test_the_converters_take_a_shorter_way_for_the_values_writes_give_most():
    """The point of them: Django's conversion is called only for a value its field converts."""
    calls = []
    original = Field.get_db_prep_save  # Which these fields inherit.

    def counted(self, value, connection):
        calls.append(value)
        return original(self, value, connection)

    names = ["run_id", "prompt_tokens", "success", "created_at"]
    database = connections[DEFAULT_DB_ALIAS]
    with pytest.MonkeyPatch.context() as patch:
        for name in names:
            kind = type(models.UsageEntry._meta.get_field(name))
            patch.setattr(kind, "get_db_prep_save", counted)
        converters = [converter(models.UsageEntry._meta.get_field(name)) for name in names]
        for plain in (["run", 3, True, AWARE], [None, None, None, None]):
            for convert, value in zip(converters, plain, strict=True):
                convert(value, database)
        assert calls == []
        others = [5, decimal.Decimal(3), 1, AWARE.isoformat()]
        for convert, value in zip(converters, others, strict=True):
            convert(value, database)
        assert calls == others


@pytest.mark.parametrize("model", [models.AgentSession, models.Run, models.UsageEntry])
def test_a_new_row_holds_what_an_instance_of_its_model_would(model):
    fields = model._meta.concrete_fields
    given = {fields[1].attname: "given"}
    instance, row, other = model(**given), new_row(model, **given), new_row(model)

    assert set(vars(row)) == {field.attname for field in fields}
    for field in fields:
        expected, got = getattr(instance, field.attname), getattr(row, field.attname)
        if field.has_default() and callable(field.default) and field.default not in (dict, list):
            assert type(got) is type(expected), field  # A fresh id, the present time.
        else:
            assert got == expected, field
        if isinstance(got, dict | list):  # Made anew for each row, never shared.
            assert got is not getattr(other, field.attname), field
    assert getattr(row, fields[1].attname) == "given"
