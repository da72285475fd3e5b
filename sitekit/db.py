"""Query helpers shared by the apps."""

from __future__ import annotations

import functools
from typing import TypeVar

from django.db import connection
from django.db.models import Model, QuerySet

_M = TypeVar("_M")


def unique_or_none(queryset: QuerySet[Model, _M]) -> _M | None:
    """The row a lookup on a unique key finds, or None.

    Not ``.first()``: on an unordered queryset it adds ``ORDER BY id LIMIT 1``, and with
    stale statistics PostgreSQL then walks another index over every row of the tenant
    and sorts (measured on 3,000 runs: 1.5 ms for the fence check instead of 30 us).
    """
    return next(iter(queryset.order_by()[:1]), None)


def insert_sql(model: type[Model], columns: tuple[str, ...], tail: str = "") -> str:
    """``INSERT INTO <table> (<columns>) VALUES (%s, ..)<tail>``, built once per statement.

    For the hot paths that write by hand because the ORM costs several times each
    query. ``tail`` (``ON CONFLICT ..``, ``RETURNING ..``) quotes names with double
    quotes, as both supported databases, PostgreSQL and SQLite, do.
    """
    return _insert_sql(connection.vendor, model, columns, tail)


@functools.cache
def _insert_sql(vendor: str, model: type[Model], columns: tuple[str, ...], tail: str) -> str:
    qn = connection.ops.quote_name
    return (
        f"INSERT INTO {qn(model._meta.db_table)} ({', '.join(map(qn, columns))})"
        f" VALUES ({', '.join(['%s'] * len(columns))}){tail}"
    )
