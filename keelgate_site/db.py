"""Query helpers shared by the apps."""

from __future__ import annotations

from typing import TypeVar

from django.db.models import Model, QuerySet

_M = TypeVar("_M")


def unique_or_none(queryset: QuerySet[Model, _M]) -> _M | None:
    """The row a lookup on a unique key finds, or None.

    Not ``.first()``: on an unordered queryset it adds ``ORDER BY id LIMIT 1``, and with
    stale statistics PostgreSQL then walks another index over every row of the tenant
    and sorts (measured on 3,000 runs: 1.5 ms for the fence check instead of 30 us).
    """
    return next(iter(queryset.order_by()[:1]), None)
