"""Lists that filter and page, declared once: the filters a list accepts, its order, its cursors.

Every list of the site (the runs, the inbox's two queues, the audit chain) is a
:class:`Listing`: its order, a :class:`Keyset` of columns ending with one that is unique
among the rows listed, and the filters it accepts, each a :class:`Filter` naming the
field it narrows and how. One call reads a page::

    RUNS = Listing(
        Keyset(Run, "-created_at", "-id"),
        Filter("status"),
        Filter("q", "run_id", "goal", lookup="icontains"),
    )
    page = RUNS.page(Run.objects.filter(tenant_id__in=ids), {"status": "waiting"}, cursor=cursor, limit=50)
    page.rows, page.next_cursor  # None on the last page

Keyset, not offset, pagination: a page starts after the last row of the one before, so it
stays put while new rows arrive at the top, and reading page 1000 costs what page 1 does.

A cursor is that last row's key, as JSON in URL-safe base64: opaque to clients, not
secret, not signed. It only says where to start in a list the caller may read anyway, so
a forged one shows nothing more; each of its values is checked against its column's type
on the way in, so anything this site did not hand out is :class:`InvalidCursorError`
(422 in the API, 400 on a console page), never a database error.

A filter parses its own text (:meth:`Listing.parse` reads a query string), so a list that
takes GitHub-style qualifiers declares them as filters and reads the search line with
:func:`qualifiers`::

    Listing(Keyset(Run, "id"), Filter("agent"), Range("created", "created_at", parse=time_span))
    values = listing.parse(qualifiers("agent:paper-trader created:>=2026-01-01"))

A range's bound may be a stretch (:class:`Span`): :func:`time_span` reads ``2026-12-01`` as
that whole day, so ``created:2026-12-01`` keeps the day's rows and ``created:<=2026-12-01``
keeps the day itself. A filter that is not one lookup overrides :meth:`Filter.where`, as
:class:`Range` does.

The hottest list, the API's runs, is read by :meth:`Listing.values_page`: the same page
from a statement built once per shape (:mod:`sitekit.keyset_sql`).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, Generic, TypeVar

from django.db.models import DateTimeField, F, Field, IntegerField, Model, Q, QuerySet
from django.db.models.expressions import OrderBy

from sitekit import keyset_sql
from sitekit.errors import InvalidCursorError

__all__ = [
    "Column",
    "Filter",
    "Key",
    "Keyset",
    "Listing",
    "Page",
    "Range",
    "Span",
    "flag",
    "one_of",
    "qualifiers",
    "text",
    "time_span",
]

_Row = TypeVar("_Row")

Key = tuple[Any, ...]
"""A row's values in the keyset's columns: where the next page starts."""

_BIGINT = (-(2**63), 2**63 - 1)
"""The range of a database integer: a cursor's number outside it is refused, not sent."""


# -- the order --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    """One column of a keyset order. ``nullable``: the column may hold NULL (no value),
    which sorts after every value whichever the direction (an approval without a deadline)."""

    name: str
    descending: bool = False
    nullable: bool = False

    @classmethod
    def of(cls, spec: str | Column) -> Column:
        """``"-created_at"`` (newest first) or ``"seq"``, as Django's ``order_by`` spells them."""
        if isinstance(spec, Column):
            return spec
        return cls(spec.removeprefix("-"), descending=spec.startswith("-"))

    def order_by(self) -> OrderBy:
        nulls_last = True if self.nullable else None
        return (
            F(self.name).desc(nulls_last=nulls_last)
            if self.descending
            else F(self.name).asc(nulls_last=nulls_last)
        )

    def same(self, value: Any) -> Q:
        """Rows whose value here is ``value``."""
        return Q(**{f"{self.name}__isnull": True}) if value is None else Q(**{self.name: value})

    def beyond(self, value: Any) -> Q | None:
        """Rows whose value here comes after ``value`` in this order (None: no row can)."""
        if value is None:
            return None  # NULL sorts last: nothing comes after it
        strictly = Q(**{f"{self.name}__{'lt' if self.descending else 'gt'}": value})
        return strictly | Q(**{f"{self.name}__isnull": True}) if self.nullable else strictly

    def reached(self, value: Any) -> Q:
        """Rows at or after ``value`` here (not nullable): implied by the keyset's condition,
        and spelled out for the index, so a page deep in a list starts at its cursor instead of
        walking every row before it."""
        return Q(**{f"{self.name}__{'lte' if self.descending else 'gte'}": value})


class Keyset:
    """An order of ``model``'s rows whose last column is unique among the rows listed (the
    tie-breaker, usually ``id``), so every row has one place and a cursor names it."""

    def __init__(self, model: type[Model], *columns: str | Column) -> None:
        self.model = model
        self.columns = tuple(Column.of(c) for c in columns)
        if not self.columns or self.columns[-1].nullable:
            raise ValueError("a keyset ends with a column that is never NULL")
        self._checks = tuple(_check(model, column) for column in self.columns)

    def __repr__(self) -> str:
        names = ", ".join(f"{'-' if c.descending else ''}{c.name}" for c in self.columns)
        return f"Keyset({self.model.__name__}, {names})"

    def reversed(self) -> Keyset:
        """The same keyset read the other way (NULLs still last)."""
        return Keyset(self.model, *(replace(c, descending=not c.descending) for c in self.columns))

    def order_by(self) -> list[OrderBy]:
        """The order as ``order_by()`` arguments."""
        return [column.order_by() for column in self.columns]

    def after(self, key: Key) -> Q:
        """The rows that come after the row whose key is ``key``."""
        terms = []
        for i, (column, value) in enumerate(zip(self.columns, key, strict=True)):
            beyond = column.beyond(value)
            if beyond is not None:
                earlier = [c.same(v) for c, v in zip(self.columns[:i], key[:i], strict=True)]
                terms.append(Q(*earlier, beyond))
        condition = terms[0]
        for term in terms[1:]:
            condition |= term
        first, value = self.columns[0], key[0]
        if len(self.columns) > 1 and not first.nullable:
            return first.reached(value) & condition
        return condition

    def key(self, row: Any) -> Key:
        """A row's key: a model instance, or a ``values()`` dict holding the columns."""
        if isinstance(row, dict):
            return tuple(row[c.name] for c in self.columns)
        return tuple(getattr(row, c.name) for c in self.columns)

    def encode(self, key: Key) -> str:
        """``key`` as an opaque cursor."""
        values = [v.isoformat() if isinstance(v, datetime) else v for v in key]
        raw = json.dumps(values, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    def decode(self, cursor: str) -> Key:
        """The key a cursor of :meth:`encode` holds; InvalidCursorError for anything else."""
        try:
            values = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
            if not isinstance(values, list) or len(values) != len(self.columns):
                raise ValueError(cursor)
            return tuple(check(value) for check, value in zip(self._checks, values, strict=True))
        except (binascii.Error, ValueError, TypeError, OverflowError) as exc:  # JSONDecodeError: ValueError
            raise InvalidCursorError() from exc


def _check(model: type[Model], column: Column) -> Callable[[Any], Any]:
    """How a cursor's value for ``column`` is read back: as its field's type, or ValueError."""
    field = model._meta.pk if column.name in ("pk", "id") else model._meta.get_field(column.name)
    assert isinstance(field, Field), f"{model.__name__}.{column.name} is not a column"
    read: Callable[[Any], Any]
    if isinstance(field, DateTimeField):
        read = _aware_time
    elif isinstance(field, IntegerField):  # ids, sequence numbers
        read = _id if field.primary_key else _integer
    else:
        read = _text
    if not column.nullable:
        return read
    return lambda value: None if value is None else read(value)


def _aware_time(value: Any) -> datetime:
    at = datetime.fromisoformat(value)  # TypeError for a number
    if at.tzinfo is None:  # the database holds aware times: a naive one was not ours
        raise ValueError(f"a naive time: {value!r}")
    # In UTC, as the site writes them; a time that has none (year 1 at +14:00) is refused
    # here, where SQLite's adapter would otherwise raise OverflowError mid-query.
    return at.astimezone(UTC)


def _integer(value: Any, low: int = _BIGINT[0]) -> int:
    if type(value) is not int or not low <= value <= _BIGINT[1]:  # bool is no int here
        raise ValueError(f"not a database integer: {value!r}")
    return value


def _id(value: Any) -> int:
    return _integer(value, 1)


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"not text: {value!r}")
    return value


# -- filters ----------------------------------------------------------------------------------


def text(value: str) -> str:
    """A filter's text as typed, without the spaces around it."""
    return value.strip()


def flag(value: str) -> bool:
    """A parse for a filter that is on (``1``) or not given."""
    if value != "1":
        raise ValueError(f"not a flag: {value!r}")
    return True


def one_of(choices: Callable[[], Iterable[str]]) -> Callable[[str], str]:
    """A parse for a filter whose value is one of ``choices()`` (read when parsing, so a
    registry that grows is seen), exactly as offered."""

    def parse(value: str) -> str:
        if value not in set(choices()):
            raise ValueError(f"not offered: {value!r}")
        return value

    return parse


class Filter:
    """One filter a list accepts: ``name`` (its query parameter, or qualifier ``name:``)
    keeps the rows where any of ``fields`` (default: the field called ``name``) matches
    the value by ``lookup`` (Django's: ``exact``, ``icontains``, ``lte``...).

    ``parse`` turns the filter's text into its value; it raises ValueError for text that is
    not one. A filter that is not one lookup (a date range) overrides :meth:`where`.
    """

    def __init__(
        self, name: str, *fields: str, lookup: str = "exact", parse: Callable[[str], Any] = text
    ) -> None:
        self.name = name
        self.fields = fields or (name,)
        self.lookup = lookup
        self.parse = parse

    def __repr__(self) -> str:
        return f"Filter({self.name!r}, {', '.join(self.fields)}, lookup={self.lookup!r})"

    def where(self, value: Any) -> Q:
        """The rows this filter keeps for ``value``."""
        suffix = "" if self.lookup == "exact" else f"__{self.lookup}"
        found = Q(**{f"{self.fields[0]}{suffix}": value})
        for name in self.fields[1:]:
            found |= Q(**{f"{name}{suffix}": value})
        return found

    @property
    def equality(self) -> str | None:
        """The one field this filter compares for equality, if that is all it does."""
        return self.fields[0] if self.lookup == "exact" and len(self.fields) == 1 else None


@dataclass(frozen=True)
class Span:
    """A bound that is a stretch, not a point: ``2026-12-01`` is the whole day, from ``start``
    (included) to ``end`` (excluded). A :class:`Range` whose ``parse`` returns spans compares
    the stretch as a whole (:func:`time_span` reads times so)."""

    start: Any
    end: Any


_ISO_TIME = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})"
    r"(?:[T ](\d{2})(?::(\d{2})(?::(\d{2})(?:\.(\d{1,6}))?)?)?)?"
    r"(Z|[+-]\d{2}(?::?\d{2})?)?"
)


def time_span(value: str) -> Span:
    """The stretch of time an ISO 8601 text names, as wide as its precision: a date is its
    day, ``2026-12-01T10`` an hour, ``...T10:30`` a minute, down to the microsecond.

    Aware UTC datetimes. A time without an offset is UTC (the console shows UTC); a date
    is a UTC day. ValueError for anything else, and for a stretch past year 9999.
    """
    written = value.strip()
    found = _ISO_TIME.fullmatch(written)
    if found is None:
        raise ValueError(f"not an ISO 8601 date or time: {value!r}")
    hour, minute, second, fraction, offset = found.group(4, 5, 6, 7, 8)
    if offset and hour is None:
        raise ValueError(f"an offset needs a time: {value!r}")
    if fraction:
        width = timedelta(microseconds=10 ** (6 - len(fraction)))
    elif second:
        width = timedelta(seconds=1)
    elif minute:
        width = timedelta(minutes=1)
    elif hour:
        width = timedelta(hours=1)
    else:
        width = timedelta(days=1)
    at = datetime.fromisoformat(written)  # ValueError: no such day, hour or offset
    try:
        start = (at if at.tzinfo else at.replace(tzinfo=UTC)).astimezone(UTC)
        return Span(start, start + width)
    except OverflowError as exc:  # year 1 at +14:00, or the day after 9999-12-31
        raise ValueError(f"out of range: {value!r}") from exc


class Range(Filter):
    """A filter by comparison, written as GitHub's search qualifiers are: ``>=x``, ``>x``,
    ``<=x``, ``<x``, ``x..y`` (both ends included; ``*`` for an open end) or ``x`` (equal).

    ``parse`` reads one bound (a number, a time); the filter's value is its bounds, as
    ``(lookup, value)`` pairs. A bound that is a :class:`Span` (a day) is compared whole:
    ``x`` and ``x..y`` keep every value inside, ``>=x`` starts where it starts, ``>x`` where
    it ends, ``<=x`` stops where it ends and ``<x`` where it starts.
    """

    _OPERATORS = ((">=", "gte"), ("<=", "lte"), (">", "gt"), ("<", "lt"))
    _WHOLE: ClassVar[dict[str, tuple[str, str]]] = {
        "gte": ("gte", "start"),
        "gt": ("gte", "end"),
        "lte": ("lt", "end"),
        "lt": ("lt", "start"),
    }
    """How a comparison with a span reads as a comparison with one of its ends."""

    def __init__(self, name: str, field: str = "", *, parse: Callable[[str], Any] = text) -> None:
        super().__init__(name, *([field] if field else []), lookup="range", parse=self._bounds)
        self.bound = parse

    def _bounds(self, value: str) -> tuple[tuple[str, Any], ...]:
        value = value.strip()
        for operator, lookup in self._OPERATORS:
            if value.startswith(operator):
                return (self._edge(lookup, self.bound(value.removeprefix(operator))),)
        if ".." in value:
            low, high = value.split("..", 1)
            ends = (("gte", low), ("lte", high))
            bounds = tuple(self._edge(lookup, self.bound(end)) for lookup, end in ends if end.strip() != "*")
            if not bounds:
                raise ValueError(f"no bound: {value!r}")
            return bounds
        bound = self.bound(value)
        if isinstance(bound, Span):
            return (("gte", bound.start), ("lt", bound.end))
        return (("exact", bound),)

    def _edge(self, lookup: str, bound: Any) -> tuple[str, Any]:
        if not isinstance(bound, Span):
            return (lookup, bound)
        compared, end = self._WHOLE[lookup]
        return (compared, getattr(bound, end))

    def where(self, value: Any) -> Q:
        return Q(*(Q(**{f"{self.fields[0]}__{lookup}": bound}) for lookup, bound in value))


def qualifiers(search: str, names: Iterable[str] | None = None) -> dict[str, str]:
    """A search line of qualifiers (``action:run.requested actor:alice created:>2026-01-01``)
    as a query, for :meth:`Listing.parse`; the words that are no qualifier are joined
    under ``q``, the name the lists give their free-text search.

    With ``names``, only those are qualifiers: another ``word:with:colons`` is text (a
    run id may hold a colon)."""
    known = None if names is None else set(names)
    found: dict[str, str] = {}
    words = []
    for word in search.split():
        name, colon, value = word.partition(":")
        if colon and name and value and (known is None or name in known):
            found[name] = value
        else:
            words.append(word)
    if words:
        found.setdefault("q", " ".join(words))
    return found


def _set(value: Any) -> bool:
    """None and "" mean the filter is not set (False is a value: ``settled=False``)."""
    return value is not None and value != ""


# -- the list ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Page(Generic[_Row]):
    """One page of a list: its rows and where the next page starts (None: this is the last)."""

    rows: list[_Row]
    next_key: Key | None
    next_cursor: str | None
    first: bool
    """No cursor was given: the page starts at the top of the list (so a row arriving live
    that sorts before every row shown still belongs on it, as the inbox's cards do)."""


class Listing:
    """A list: its keyset order and the filters it accepts, by name."""

    def __init__(self, order: Keyset, *filters: Filter) -> None:
        self.order = order
        self.filters = {f.name: f for f in filters}
        if len(self.filters) != len(filters):
            raise ValueError("two filters of one list share a name")
        # For values_page, worked out once: the fields of the filters that are equalities,
        # and the order as the statement spells it (None: it cannot, a column may be NULL).
        self._equalities = {f.name: f.equality for f in filters}
        self._sql_order = (
            None
            if any(c.nullable for c in order.columns)
            else tuple((c.name, c.descending) for c in order.columns)
        )

    def __repr__(self) -> str:
        return f"Listing({self.order!r}, {', '.join(self.filters)})"

    def reversed(self) -> Listing:
        """The same list read the other way (the audit chain: oldest first, or newest first)."""
        return Listing(self.order.reversed(), *self.filters.values())

    def parse(self, query: Mapping[str, Any]) -> dict[str, Any]:
        """The filters set in ``query`` (a query string, or qualifiers), parsed.

        Lenient, as a link people edit by hand wants: names the list does not declare, and
        text a filter's ``parse`` refuses, are left out (the list is then less filtered).
        """
        found = {}
        for name, filter_ in self.filters.items():
            value = query.get(name)
            if not isinstance(value, str) or not value.strip():
                continue
            try:
                found[name] = filter_.parse(value)
            except ValueError:
                continue
        return found

    def filtered(
        self, rows: QuerySet[Any, _Row], values: Mapping[str, Any] | None = None
    ) -> QuerySet[Any, _Row]:
        """``rows`` narrowed by the filters set in ``values`` (a name this list does not
        declare is a KeyError: a caller's mistake), in the list's order."""
        for name, value in (values or {}).items():
            if _set(value):
                rows = rows.filter(self.filters[name].where(value))
        return rows.order_by(*self.order.order_by())

    def page(
        self,
        rows: QuerySet[Any, _Row],
        values: Mapping[str, Any] | None = None,
        *,
        cursor: str | None = None,
        after: Key | None = None,
        limit: int,
    ) -> Page[_Row]:
        """The ``limit`` rows of ``rows`` under ``values`` that come after ``cursor`` (or the
        key ``after``, for a list whose API names its position plainly), in one query."""
        start = self._start(cursor, after)
        ordered = self.filtered(rows, values)
        if start is not None:
            ordered = ordered.filter(self.order.after(start))
        return self._page(list(ordered[: limit + 1]), limit, first=start is None)

    def values_page(
        self,
        columns: tuple[str, ...],
        *,
        scope: Mapping[str, Any],
        values: Mapping[str, Any] | None = None,
        cursor: str | None = None,
        limit: int,
    ) -> Page[dict[str, Any]]:
        """What :meth:`page` gives for ``model.objects.filter(**scope).values(*columns)``,
        from one statement built once per shape (:mod:`sitekit.keyset_sql`).

        For the hottest lists. ``scope`` holds ``name: value`` and ``name__in: values``;
        the filters used must be equalities, and the keyset's columns never NULL.
        """
        if self._sql_order is None:
            raise ValueError("a statement by hand cannot order by a column that may be NULL")
        start = self._start(cursor, None)
        where = dict(scope)
        for name, value in (values or {}).items():
            if _set(value):
                field = self._equalities[name]
                if field is None:
                    raise ValueError(f"filter {name!r} is not an equality: read it with page()")
                where[field] = value
        model, order = self.order.model, self._sql_order
        rows = keyset_sql.select(model, columns, where, order=order, after=start, limit=limit + 1)
        return self._page(rows, limit, first=start is None)

    def _start(self, cursor: str | None, after: Key | None) -> Key | None:
        if cursor and after is not None:
            raise ValueError("a page starts after a cursor or after a key, not both")
        return self.order.decode(cursor) if cursor else after

    def _page(self, rows: list[_Row], limit: int, *, first: bool) -> Page[_Row]:
        """The first ``limit`` of ``limit + 1`` rows read, and where the next page starts."""
        if len(rows) <= limit:
            return Page(rows, None, None, first)
        key = self.order.key(rows[limit - 1])
        return Page(rows[:limit], key, self.order.encode(key), first)
