"""Query helpers shared by the apps."""

from __future__ import annotations

import datetime
import functools
from collections.abc import Sequence
from typing import Any, TypeVar

from django.db import connection
from django.db.models import Field, Model, QuerySet

_M = TypeVar("_M")
_Model = TypeVar("_Model", bound=Model)


def unique_or_none(queryset: QuerySet[Model, _M]) -> _M | None:
    """The row a lookup on a unique key finds, or None.

    Not ``.first()``: on an unordered queryset it adds ``ORDER BY id LIMIT 1``, and with
    stale statistics PostgreSQL then walks another index over every row of the tenant
    and sorts (docs/performance.md#unique-lookup).
    """
    return next(iter(queryset.order_by()[:1]), None)


def select_columns(model: type[Model]) -> str:
    """The model's columns, qualified by its table, in the order :func:`model_from_row` reads them."""
    qn = connection.ops.quote_name
    table = qn(model._meta.db_table)
    return ", ".join(f"{table}.{qn(str(field.column))}" for field in model._meta.concrete_fields)


def model_from_row(model: type[_Model], row: Sequence[Any]) -> _Model:
    """An instance loaded from a row of :func:`select_columns`, its values converted as the
    ORM converts them (JSON text, SQLite's timestamps and booleans): a statement written
    by hand, sent with others, still answers with a model."""
    values = _converted(list(row), _column_converters(connection.vendor, model, _names(model)))
    return model.from_db(connection.alias, _attnames(model), values)


def converted_rows(
    model: type[Model], columns: tuple[str, ...], rows: Sequence[Sequence[Any]]
) -> list[dict[str, Any]]:
    """Rows of ``columns`` (field names) from a statement written by hand, as the ORM's
    ``values()`` gives them: each value converted by the backend's and the field's converters."""
    converters = _column_converters(connection.vendor, model, columns)
    return [dict(zip(columns, _converted(list(row), converters), strict=True)) for row in rows]


def _converted(values: list[Any], converters: list[tuple[int, list[Any], Any]]) -> list[Any]:
    for i, convert, col in converters:
        for fn in convert:
            values[i] = fn(values[i], col, connection)
    return values


@functools.cache
def _attnames(model: type[Model]) -> tuple[str, ...]:
    return tuple(field.attname for field in model._meta.concrete_fields)


@functools.cache
def _names(model: type[Model]) -> tuple[str, ...]:
    return tuple(field.name for field in model._meta.concrete_fields)


@functools.cache
def _column_converters(
    vendor: str, model: type[Model], columns: tuple[str, ...]
) -> list[tuple[int, list[Any], Any]]:
    """Per column named in ``columns``, the backend's and the field's converters (as
    ``SQLCompiler.get_converters`` finds them)."""
    found = []
    for i, name in enumerate(columns):
        col = _field(model, name).get_col(model._meta.db_table)
        converters = connection.ops.get_db_converters(col) + col.get_db_converters(connection)
        if converters:
            found.append((i, converters, col))
    return found


def _field(model: type[Model], name: str) -> Field[Any, Any]:
    field = model._meta.pk if name == "pk" else model._meta.get_field(name)
    assert isinstance(field, Field) and field.column, f"{model.__name__}.{name} is not a column"
    return field


def quoted_column(model: type[Model], name: str) -> str:
    """The column of field ``name`` (or ``pk``), quoted, for a statement written by hand."""
    return str(connection.ops.quote_name(_column(model, name)))


def _column(model: type[Model], name: str) -> str:
    return str(_field(model, name).column)


def fast_timestamps(sender: Any, connection: Any, **kwargs: Any) -> None:
    """``connection_created``: read PostgreSQL timestamps with psycopg's C loader, not Python's.

    Django registers its own loader for ``timestamptz`` (to attach its time zone), a
    Python subclass of psycopg's pure-Python one, several times slower per value, and a
    page of runs holds two timestamps a row (docs/performance.md#timestamps). Where the
    session's time zone is UTC, which is Django's own, the C loader gives the same aware
    datetimes (``tzinfo`` is ``datetime.timezone.utc``), so it takes over; anywhere else
    Django's stays.
    """
    if connection.vendor != "postgresql" or connection.timezone is not datetime.UTC:
        return
    raw = connection.connection
    if raw.adapters.get_loader(_TIMESTAMPTZ_OID, _CTimestamptzLoader.format) is _CTimestamptzLoader:
        return  # a pooled connection handed out again (each request): done when it was made
    if raw.info.parameter_status("TimeZone") != "UTC":
        return
    raw.adapters.register_loader("timestamptz", _CTimestamptzLoader)


_TIMESTAMPTZ_OID = 1184
"""PostgreSQL's built-in ``timestamptz`` type (``psycopg.postgres.types["timestamptz"].oid``)."""


@functools.cache
def _c_timestamptz_loader() -> Any:
    from psycopg import adapters
    from psycopg.pq import Format

    return adapters.get_loader(_TIMESTAMPTZ_OID, Format.TEXT)


class _CTimestamptzLoader:
    """Makes psycopg's C loader (which cannot be subclassed) for each cursor.

    ``timezone`` is what Django's ``create_cursor`` compares with its own before it
    registers its loader again for a cursor; ``format`` is what psycopg's registry reads.
    """

    timezone = datetime.UTC
    format = 0  # psycopg.pq.Format.TEXT

    def __new__(cls, oid: int, context: Any = None) -> Any:
        return _c_timestamptz_loader()(oid, context)
