"""The inbox as a work queue: the order that serves the waiting, filters, keyset pages.

Unknown outcomes come first (a run is stuck on each), then approvals by expiry, soonest
first (those without a deadline last), then by age, oldest first. Pages are keyset
pages over that order, so every item is reachable and a page stays put while new items
arrive. The same filter and the same sort key serve the page and the live stream: the
websocket consumer sends a filtered view only the items that match it, and each card
carries its sort key (``data-sort``) so the browser inserts a new one where it belongs.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from django.db.models import Count, F, Min, Q, QuerySet

from approvals.models import Approval, ApprovalStatus, UnknownOutcome
from sitekit.errors import InvalidCursorError

PAGE_SIZE = 50
"""Cards per section on one page: enough to work through, light enough to render at once."""

EXPIRING_SOON = timedelta(minutes=30)
""""Expiring soon" means a deadline within this long."""

TEXT_MAX = 128
"""Longest agent, tool or run text a filter accepts (longer input is cut, not an error)."""

_NEVER = "~"
"""Sorts after every ISO timestamp: the sort key of an approval with no deadline."""


@dataclass(frozen=True)
class InboxFilter:
    """What the operator narrowed the inbox to; the empty filter shows everything."""

    agent: str = ""
    tool: str = ""
    run: str = ""
    high_impact: bool = False
    expiring: bool = False

    @classmethod
    def parse(cls, query: Mapping[str, Any]) -> InboxFilter:
        """From a page's (or a socket's) query string; unknown or odd values are ignored."""

        def text(name: str) -> str:
            value = query.get(name, "")
            return value.strip()[:TEXT_MAX] if isinstance(value, str) else ""

        return cls(
            agent=text("agent"),
            tool=text("tool"),
            run=text("run"),
            high_impact=query.get("high_impact") == "1",
            expiring=query.get("expiring") == "1",
        )

    @property
    def active(self) -> bool:
        return self != InboxFilter()

    @property
    def approvals_only(self) -> bool:
        """High impact and expiring describe approvals: unknown outcomes are filtered out."""
        return self.high_impact or self.expiring

    def params(self) -> dict[str, str]:
        """The filter as query parameters (only those set)."""
        found: dict[str, str] = {}
        for field in fields(self):
            value = getattr(self, field.name)
            if value is True:
                found[field.name] = "1"
            elif value:
                found[field.name] = str(value)
        return found

    def query(self, **extra: str | None) -> str:
        """A query string of this filter plus ``extra`` (None drops a key)."""
        params: dict[str, str] = {**self.params(), **{k: v for k, v in extra.items() if v}}
        return urlencode(params)

    def approvals(self, rows: QuerySet[Approval], *, now: datetime) -> QuerySet[Approval]:
        """``rows`` narrowed to this filter."""
        rows = self._common(rows)
        if self.high_impact:
            rows = rows.filter(high_impact=True)
        if self.expiring:
            rows = rows.filter(expires_at__isnull=False, expires_at__lte=now + EXPIRING_SOON)
        return rows

    def unknowns(self, rows: QuerySet[UnknownOutcome]) -> QuerySet[UnknownOutcome]:
        """``rows`` narrowed to this filter (none at all under an approvals-only filter)."""
        return rows.none() if self.approvals_only else self._common(rows)

    def _common(self, rows: QuerySet[Any]) -> QuerySet[Any]:
        if self.agent:
            rows = rows.filter(agent=self.agent)
        if self.tool:
            rows = rows.filter(tool=self.tool)
        if self.run:
            rows = rows.filter(run_id=self.run)
        return rows


# -- the order ---------------------------------------------------------------------------------


def approvals_in_order(rows: QuerySet[Approval]) -> QuerySet[Approval]:
    """Soonest deadline first (none last), then oldest first."""
    return rows.order_by(F("expires_at").asc(nulls_last=True), "requested_at", "id")


def unknowns_in_order(rows: QuerySet[UnknownOutcome]) -> QuerySet[UnknownOutcome]:
    """Oldest first: the longest-stuck run first."""
    return rows.order_by("detected_at", "id")


def _stamp(at: datetime) -> str:
    """A fixed-width UTC timestamp: compares as text the way the times compare."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def sort_key(row: Approval | UnknownOutcome) -> str:
    """The item's place in its section as text: the browser compares keys as strings."""
    if isinstance(row, Approval):
        due = _stamp(row.expires_at) if row.expires_at else _NEVER
        return f"{due}|{_stamp(row.requested_at)}|{row.pk:015d}"
    return f"{_stamp(row.detected_at)}|{row.pk:015d}"


# -- keyset pages ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Page:
    """One page of a section: its rows, and the cursor of the next page (None at the end)."""

    rows: list[Any]
    next_cursor: str | None
    first: bool
    """This is the first page (new items that sort before every card still belong here)."""


def approvals_page(rows: QuerySet[Approval], *, cursor: str | None, size: int = PAGE_SIZE) -> Page:
    """The page of approvals after ``cursor``, in queue order."""
    ordered = approvals_in_order(rows)
    if cursor:
        due, requested, pk = _decode(cursor, 3)
        ordered = ordered.filter(_after_approval(due, requested, pk))
    return _page(ordered, size, first=not cursor)


def unknowns_page(rows: QuerySet[UnknownOutcome], *, cursor: str | None, size: int = PAGE_SIZE) -> Page:
    """The page of unknown outcomes after ``cursor``, in queue order."""
    ordered = unknowns_in_order(rows)
    if cursor:
        detected, pk = _decode(cursor, 2)
        if detected is None:
            raise InvalidCursorError()
        ordered = ordered.filter(Q(detected_at__gt=detected) | Q(detected_at=detected, id__gt=pk))
    return _page(ordered, size, first=not cursor)


def _after_approval(due: datetime | None, requested: datetime | None, pk: int) -> Q:
    if requested is None:
        raise InvalidCursorError()
    same_due = Q(expires_at__isnull=True) if due is None else Q(expires_at=due)
    later_same_due = same_due & (Q(requested_at__gt=requested) | Q(requested_at=requested, id__gt=pk))
    if due is None:
        return later_same_due
    return Q(expires_at__isnull=True) | Q(expires_at__gt=due) | later_same_due


def _page(rows: QuerySet[Any], size: int, *, first: bool) -> Page:
    found = list(rows[: size + 1])
    if len(found) <= size:
        return Page(found, None, first)
    last = found[size - 1]
    if isinstance(last, Approval):
        cursor = _encode([last.expires_at, last.requested_at, last.pk])
    else:
        cursor = _encode([last.detected_at, last.pk])
    return Page(found[:size], cursor, first)


def _encode(parts: list[Any]) -> str:
    values = [p.isoformat() if isinstance(p, datetime) else p for p in parts]
    raw = json.dumps(values, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode(cursor: str, length: int) -> list[Any]:
    """A cursor's times (or None) and its id; InvalidCursorError for anything else."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        values = json.loads(raw)
        if not isinstance(values, list) or len(values) != length:
            raise ValueError(cursor)
        *times, pk = values
        parsed = [None if t is None else datetime.fromisoformat(t) for t in times]
    except (binascii.Error, ValueError, TypeError) as exc:  # JSONDecodeError is a ValueError
        raise InvalidCursorError() from exc
    if any(t is not None and t.tzinfo is None for t in parsed):
        raise InvalidCursorError()
    if not isinstance(pk, int) or isinstance(pk, bool) or pk <= 0:
        raise InvalidCursorError()
    return [*parsed, pk]


# -- what the header says -----------------------------------------------------------------------


@dataclass(frozen=True)
class SectionTotal:
    """How many items of a section match, and since when the oldest of them waits."""

    count: int
    oldest: datetime | None


def approvals_total(rows: QuerySet[Approval]) -> SectionTotal:
    """Count and oldest request of ``rows``, in one query."""
    found = rows.order_by().aggregate(n=Count("id"), at=Min("requested_at"))
    return SectionTotal(found["n"], found["at"])


def unknowns_total(rows: QuerySet[UnknownOutcome]) -> SectionTotal:
    """Count and oldest detection of ``rows``, in one query."""
    found = rows.order_by().aggregate(n=Count("id"), at=Min("detected_at"))
    return SectionTotal(found["n"], found["at"])


def filter_choices(*, tenant_ids: Iterable[str], limit: int = 200) -> dict[str, list[str]]:
    """The agents and tools that have something waiting: the options of the filter form."""
    ids = list(tenant_ids)
    waiting = Approval.objects.filter(tenant_id__in=ids, status=ApprovalStatus.PENDING)
    stuck = UnknownOutcome.objects.filter(tenant_id__in=ids, settled=False)
    pairs = set(
        waiting.order_by()
        .values_list("agent", "tool")
        .union(stuck.order_by().values_list("agent", "tool"))[:limit]
    )
    return {
        "agents": sorted({agent for agent, _ in pairs}),
        "tools": sorted({tool for _, tool in pairs}),
    }
