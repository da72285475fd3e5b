"""A keyset page from a statement written by hand, built once per shape.

:meth:`sitekit.paging.Listing.values_page` reads through here: what
``model.objects.filter(**where).order_by(*order).filter(after).values(*columns)[:limit]``
gives, without the queryset. For the hottest list of the API, building and compiling the
queryset and Django's row iteration were most of the cost of reading a page (see
docs/performance.md); the statement's text depends only on the shape of the request (which
filters, how many tenants, a cursor or not), so it is built once per shape and cached.

Values go through the fields' own adapters and converters (:func:`sitekit.db.converted_rows`),
so rows are what ``values()`` gives; ``tests/site/api/test_run_list_sql.py`` walks every
page of both and compares them.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from django.db import connection
from django.db.models import Field, Model

from sitekit.db import converted_rows, quoted_column

__all__ = ["select"]


def select(
    model: type[Model],
    columns: tuple[str, ...],
    where: Mapping[str, Any],
    *,
    order: tuple[tuple[str, bool], ...],
    after: tuple[Any, ...] | None,
    limit: int,
) -> list[dict[str, Any]]:
    """Up to ``limit`` rows of ``columns`` (as ``values()`` dicts) matching ``where``, in
    ``order`` (``(field, descending)`` pairs, none of them NULL, the last unique), after the
    key ``after``.

    ``where`` holds ``name: value`` (equal) and ``name__in: values`` (one of).
    """
    names = tuple(where)
    sizes = tuple(len(v) if name.endswith("__in") else None for name, v in where.items())
    if 0 in sizes:
        return []  # ``IN ()``: the ORM answers nothing without asking
    sql = _sql(connection.vendor, model, columns, names, sizes, order, after is not None)
    params: list[Any] = []
    for name, value in where.items():
        target = _field(model, name.removesuffix("__in"))
        for v in value if name.endswith("__in") else [value]:
            params.append(target.get_db_prep_value(v, connection))
    if after is not None:
        key = [
            _field(model, name).get_db_prep_value(v, connection)
            for (name, _), v in zip(order, after, strict=True)
        ]
        params += _after_params(key)
    params.append(limit)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    return converted_rows(model, columns, rows)


def _after_params(key: list[Any]) -> list[Any]:
    """The key's values in the order :func:`_after` asks for them."""
    params = [key[0]] if len(key) > 1 else []
    for i in range(len(key)):
        params += key[: i + 1]
    return params


def _after(model: type[Model], order: tuple[tuple[str, bool], ...]) -> str:
    """Rows after a key: ``a < %s OR (a = %s AND id < %s)`` for ``-a, -id``.

    With more than one column it is led by ``a <= %s``, implied by the rest and there for
    the index, where a page deep in the list then starts at its cursor.
    """
    terms = []
    for i, (name, descending) in enumerate(order):
        same = [f"{quoted_column(model, n)} = %s" for n, _ in order[:i]]
        beyond = f"{quoted_column(model, name)} {'<' if descending else '>'} %s"
        terms.append(beyond if not same else f"({' AND '.join([*same, beyond])})")
    condition = " OR ".join(terms)
    if len(order) == 1:
        return condition
    first, descending = order[0]
    return f"{quoted_column(model, first)} {'<=' if descending else '>='} %s AND ({condition})"


@functools.cache
def _sql(
    vendor: str,
    model: type[Model],
    columns: tuple[str, ...],
    names: tuple[str, ...],
    sizes: tuple[int | None, ...],
    order: tuple[tuple[str, bool], ...],
    after: bool,
) -> str:
    conditions = []
    for name, size in zip(names, sizes, strict=True):
        column = quoted_column(model, name.removesuffix("__in"))
        conditions.append(f"{column} = %s" if size is None else f"{column} IN ({', '.join(['%s'] * size)})")
    if after:
        conditions.append(_after(model, order))
    where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
    order_by = ", ".join(f"{quoted_column(model, n)} {'DESC' if d else 'ASC'}" for n, d in order)
    table = connection.ops.quote_name(model._meta.db_table)
    return (
        f"SELECT {', '.join(quoted_column(model, c) for c in columns)} FROM {table}"
        f"{where} ORDER BY {order_by} LIMIT %s"
    )


def _field(model: type[Model], name: str) -> Field[Any, Any]:
    field = model._meta.pk if name == "pk" else model._meta.get_field(name)
    assert isinstance(field, Field) and field.column, f"{model.__name__}.{name} is not a column"
    return field
