"""Python values as the ORM sends them to the database, for the written-out statements.

A step's commit and a run's start write about ninety values each, and Django's own conversion
(`Field.get_db_prep_save`) makes a handful of calls for each, to find for most of them that a
string stays a string: measured on the values a run's start and steps write, about 0.2 ms of
CPU a start and 0.1 to 0.2 ms a step, some 4% of either. Each field here gets a converter that
gives the values the hot paths write most (`None`, a string to a text column, an int to an
integer one, a bool, a dict or list to JSON, an aware datetime) the result Django's conversion
gives them, in one call, which halves that; any other value goes through Django's conversion.
"""

import datetime
import functools
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import (
    BigIntegerField,
    BooleanField,
    CharField,
    DateTimeField,
    Field,
    IntegerField,
    JSONField,
    Model,
    PositiveBigIntegerField,
    PositiveIntegerField,
    PositiveSmallIntegerField,
    SmallIntegerField,
    TextField,
)

Converter = Callable[[Any, BaseDatabaseWrapper], Any]

_TEXT_FIELDS = (CharField, TextField)
_INTEGER_FIELDS = (
    IntegerField,
    BigIntegerField,
    SmallIntegerField,
    PositiveIntegerField,
    PositiveBigIntegerField,
    PositiveSmallIntegerField,
)


def db_values(model: type[Model], fields: Sequence[str], values: Sequence[Any]) -> list[Any]:
    """Return `values` of the model's `fields` as the ORM would send them to the database."""
    # The database's own wrapper, not the `connection` proxy: every read through the proxy
    # looks the thread's connection up again.
    database = connections[DEFAULT_DB_ALIAS]
    return [
        convert(value, database)
        for convert, value in zip(_converters(model, tuple(fields)), values, strict=True)
    ]


def row_db_values(model: type[Model], row: SimpleNamespace, fields: Sequence[str]) -> list[Any]:
    """Return the `fields` of a row of `model` (`new_row`'s) as the ORM would send them to
    the database."""
    named = _fields(model, tuple(fields))
    return db_values(model, fields, [getattr(row, field.attname) for field in named])


def new_row(model: type[Model], /, **given: Any) -> SimpleNamespace:
    """Return a new row of `model` as an instance's attributes would hold it: `given` (by
    attribute name), each other field's default; without the instance, which costs more to
    build than its insert's parameters."""
    constant, made = _defaults(model)
    row = SimpleNamespace(**constant)
    for attname, default in made:
        if attname not in given:
            setattr(row, attname, default())
    row.__dict__.update(given)
    return row


@functools.cache
def _defaults(
    model: type[Model],
) -> tuple[dict[str, Any], tuple[tuple[str, Callable[[], Any]], ...]]:
    """Return the model's constant defaults by attribute name, and its defaults made anew for
    each row (a callable's, such as `dict` or `timezone.now`)."""
    fields = model._meta.concrete_fields
    made = tuple(
        (field.attname, field.default)
        for field in fields
        if field.has_default() and callable(field.default)
    )
    makes = {attname for attname, _ in made}
    constant = {f.attname: f.get_default() for f in fields if f.attname not in makes}
    return constant, made


@functools.cache
def _fields(model: type[Model], names: tuple[str, ...]) -> tuple[Field, ...]:
    return tuple(model._meta.get_field(name) for name in names)


@functools.cache
def _converters(model: type[Model], names: tuple[str, ...]) -> tuple[Converter, ...]:
    return tuple(converter(field) for field in _fields(model, names))


def converter(field: Field) -> Converter:
    """Return `field.get_db_prep_save`, with a shorter way for the values writes give most.

    Only fields of Django's own classes take it (a subclass may convert otherwise); a foreign
    key takes its target's when that is text (on SQLite and PostgreSQL, the databases Helix
    runs on, an empty key is sent as it is, as Django sends it). `None` is sent as it is.
    """
    convert = field.get_db_prep_save
    kind = type(field.target_field if field.is_relation else field)
    if kind in _TEXT_FIELDS:

        def text(value: Any, database: BaseDatabaseWrapper) -> Any:
            if value is None or isinstance(value, str):  # Choices' members are strings too.
                return value
            return convert(value, database)

        return text
    if field.is_relation:
        return convert
    if kind in _INTEGER_FIELDS:
        internal_type = field.get_internal_type()

        def integer(value: Any, database: BaseDatabaseWrapper) -> Any:
            if type(value) is int:
                return database.ops.adapt_integerfield_value(value, internal_type)
            return None if value is None else convert(value, database)

        return integer
    if kind is BooleanField:

        def boolean(value: Any, database: BaseDatabaseWrapper) -> Any:
            if value is None or type(value) is bool:
                return value
            return convert(value, database)

        return boolean
    if kind is JSONField:
        encoder = field.encoder

        def json_value(value: Any, database: BaseDatabaseWrapper) -> Any:
            if type(value) in (dict, list):
                return database.ops.adapt_json_value(value, encoder)
            return None if value is None else convert(value, database)

        return json_value
    if kind is DateTimeField:

        def aware_datetime(value: Any, database: BaseDatabaseWrapper) -> Any:
            if type(value) is datetime.datetime and value.utcoffset() is not None:
                return database.ops.adapt_datetimefield_value(value)
            return None if value is None else convert(value, database)

        return aware_datetime
    return convert
