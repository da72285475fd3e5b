"""Row writes on PostgreSQL by statements built once per shape, sent with the group's messages.

The readable default is :class:`sitekit.commits.RowWriter`, the ORM's statements run at
once. Here the same writes are built once per shape (table, columns, conditions) and
go through :class:`sitekit.postgresql.commits.PostgresCommitGroup`: an unanswered write
waits for the transaction's next round trip, prepared once per connection, instead of
taking one of its own; and a statement the ORM would compile at every call (a run's
move, an inbox row) costs no compilation.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from django.db import connection
from django.db.models import Model

from sitekit.commits import RowWriter
from sitekit.db import quoted_column


class PostgresRowWriter(RowWriter):
    """:class:`~sitekit.commits.RowWriter` by statements sent through the group."""

    def insert_missing(self, model: type[Model], key: Mapping[str, Any], values: Mapping[str, Any]) -> None:
        conflict = ", ".join(quoted_column(model, name) for name in key)
        sql = insert_sql(model, (*key, *values), f" ON CONFLICT ({conflict}) DO NOTHING")
        self.group.send(sql, db_values(model, {**key, **values}))

    def update_changed(self, model: type[Model], key: Mapping[str, Any], values: Mapping[str, Any]) -> None:
        values_db = db_values(model, dict(values))
        sql = update_sql(model, tuple(values), tuple(key), if_changed=True)
        self.group.send(sql, [*values_db, *db_values(model, dict(key)), *values_db])

    def update(self, row: Model, values: Mapping[str, Any]) -> None:
        model = type(row)
        sql = update_sql(model, tuple(values), ("pk",))
        self.group.send(sql, [*db_values(model, dict(values)), row.pk])
        for name, value in values.items():
            setattr(row, name, value)

    def update_where(self, model: type[Model], where: Mapping[str, Any], values: Mapping[str, Any]) -> int:
        """Answered: sent with every write waiting before it. A lookup, NULL or an
        expression (``F("lease_epoch") + 1``) takes the ORM's statement."""
        if not _plain(values, where):
            return super().update_where(model, where, values)
        sql = update_sql(model, tuple(values), tuple(where))
        params = [*db_values(model, dict(values)), *db_values(model, dict(where))]
        return self.group.query(sql, params).rowcount


def _plain(values: Mapping[str, Any], where: Mapping[str, Any]) -> bool:
    """Only values to set and equalities to match: no lookup, no NULL, no expression."""
    expressions = any(hasattr(v, "resolve_expression") for v in (*values.values(), *where.values()))
    lookups = any("__" in name or value is None for name, value in where.items())
    return not expressions and not lookups


def insert_sql(model: type[Model], columns: tuple[str, ...], tail: str = "") -> str:
    """``INSERT INTO <table> (<columns>) VALUES (%s, ..)<tail>``, built once per shape.

    ``tail`` (``ON CONFLICT ..``, ``RETURNING ..``) quotes names with double quotes.
    """
    qn = connection.ops.quote_name
    return _insert_sql(qn(model._meta.db_table), tuple(quoted_column(model, c) for c in columns), tail)


@functools.cache
def _insert_sql(table: str, columns: tuple[str, ...], tail: str) -> str:
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))}){tail}"


@functools.cache
def update_sql(
    model: type[Model], columns: tuple[str, ...], where: tuple[str, ...], *, if_changed: bool = False
) -> str:
    """``UPDATE <table> SET <column> = %s, .. WHERE <column> = %s AND ..``, built once per shape.

    Names are field names (or ``pk``); :func:`db_values` adapts the values in the same order.
    ``if_changed`` adds ``AND (<columns>) IS DISTINCT FROM (%s, ..)``, taking the set
    values a second time: a row already so is neither rewritten nor locked, and a row
    another transaction has locked is not waited for.
    """
    qn = connection.ops.quote_name
    sets = ", ".join(f"{quoted_column(model, name)} = %s" for name in columns)
    conditions = " AND ".join(f"{quoted_column(model, name)} = %s" for name in where)
    sql = f"UPDATE {qn(model._meta.db_table)} SET {sets} WHERE {conditions}"
    if not if_changed:
        return sql
    names = ", ".join(quoted_column(model, name) for name in columns)
    return f"{sql} AND ({names}) IS DISTINCT FROM ({', '.join(['%s'] * len(columns))})"


def db_values(model: type[Model], values: dict[str, Any]) -> list[Any]:
    """``values`` (field name to Python value) as the database takes them, as the ORM
    adapts them for a write (a JSON field's value becomes the driver's JSON wrapper)."""
    meta = model._meta
    return [
        (meta.pk if name == "pk" else meta.get_field(name)).get_db_prep_save(value, connection)  # type: ignore[union-attr]
        for name, value in values.items()
    ]
