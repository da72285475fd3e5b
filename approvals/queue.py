"""The inbox as a work queue: the order that serves the waiting, filters, keyset pages.

Unknown outcomes come first (a run is stuck on each), then approvals by expiry, soonest
first (those without a deadline last), then by age, oldest first. Pages are keyset
pages over that order, so every item is reachable and a page stays put while new items
arrive. The same filter and the same sort key serve the page and the live stream: the
websocket consumer sends a filtered view only the items that match it, and each card
carries its sort key (``data-sort``) so the browser inserts a new one where it belongs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from django.db.models import Count, Min, QuerySet

from approvals.models import Approval, ApprovalStatus, UnknownOutcome
from sitekit import paging
from sitekit.paging import Column, Filter, Keyset, Listing, flag

PAGE_SIZE = 50
"""Cards per section on one page: enough to work through, light enough to render at once."""

EXPIRING_SOON = timedelta(minutes=30)
""""Expiring soon" means a deadline within this long."""

TEXT_MAX = 128
"""Longest agent, tool or run text a filter accepts (longer input is cut, not an error)."""

Page = paging.Page[Any]
"""A page of either section (every list's page, :class:`sitekit.paging.Page`)."""

_NEVER = "~"
"""Sorts after every ISO timestamp: the sort key of an approval with no deadline."""


def _cut(value: str) -> str:
    return value.strip()[:TEXT_MAX]


APPROVAL_QUEUE = Listing(
    Keyset(Approval, Column("expires_at", nullable=True), "requested_at", "id"),
    Filter("agent", parse=_cut),
    Filter("tool", parse=_cut),
    Filter("run", "run_id", parse=_cut),
    Filter("high_impact", parse=flag),
    # Its value when applied is the latest deadline that counts as expiring: see InboxFilter.
    Filter("expiring", "expires_at", lookup="lte", parse=flag),
)
"""The approvals section: soonest deadline first (none last), then oldest first."""

UNKNOWN_QUEUE = Listing(
    Keyset(UnknownOutcome, "detected_at", "id"),
    Filter("agent", parse=_cut),
    Filter("tool", parse=_cut),
    Filter("run", "run_id", parse=_cut),
)
"""The unknown outcomes section: oldest first, the longest-stuck run first."""


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
        return cls(**APPROVAL_QUEUE.parse(query))

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
        """``rows`` narrowed to this filter, in queue order."""
        values = {
            "agent": self.agent,
            "tool": self.tool,
            "run": self.run,
            "high_impact": True if self.high_impact else None,
            "expiring": now + EXPIRING_SOON if self.expiring else None,
        }
        return APPROVAL_QUEUE.filtered(rows, values)

    def unknowns(self, rows: QuerySet[UnknownOutcome]) -> QuerySet[UnknownOutcome]:
        """``rows`` narrowed to this filter (none at all under an approvals-only filter), in queue order."""
        if self.approvals_only:
            return rows.none()
        return UNKNOWN_QUEUE.filtered(rows, {"agent": self.agent, "tool": self.tool, "run": self.run})


# -- the order ---------------------------------------------------------------------------------


def _stamp(at: datetime) -> str:
    """A fixed-width UTC timestamp: compares as text the way the times compare."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def sort_key(row: Approval | UnknownOutcome) -> str:
    """The item's place in its section as text (:data:`APPROVAL_QUEUE`'s and
    :data:`UNKNOWN_QUEUE`'s order): the browser compares keys as strings."""
    if isinstance(row, Approval):
        due = _stamp(row.expires_at) if row.expires_at else _NEVER
        return f"{due}|{_stamp(row.requested_at)}|{row.pk:015d}"
    return f"{_stamp(row.detected_at)}|{row.pk:015d}"


# -- keyset pages ------------------------------------------------------------------------------


def approvals_page(
    rows: QuerySet[Approval], *, cursor: str | None, size: int = PAGE_SIZE
) -> paging.Page[Approval]:
    """The page of approvals after ``cursor``, in queue order."""
    return APPROVAL_QUEUE.page(rows, cursor=cursor, limit=size)


def unknowns_page(
    rows: QuerySet[UnknownOutcome], *, cursor: str | None, size: int = PAGE_SIZE
) -> paging.Page[UnknownOutcome]:
    """The page of unknown outcomes after ``cursor``, in queue order."""
    return UNKNOWN_QUEUE.page(rows, cursor=cursor, limit=size)


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
