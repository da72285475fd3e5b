"""The inbox as a person sees it: one card per item, and a page's two sections of cards.

The inbox page (:mod:`approvals.views`) and the live websocket (:mod:`approvals.consumers`)
show the same cards, so everything here takes a role and a username, not a request
(a request only adds the CSRF token and the return path to a card's forms). What is
waiting, in which order and which page of it, is :mod:`approvals.queue`'s; who may act
on a card is read from the role here, and enforced again by :mod:`approvals.services`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from django.http import HttpRequest
from django.template.loader import render_to_string

from approvals.edit_form import EditField, edit_fields
from approvals.models import Approval, UnknownOutcome
from approvals.queue import (
    InboxFilter,
    Page,
    approvals_page,
    approvals_total,
    sort_key,
    unknowns_page,
    unknowns_total,
)
from approvals.selectors import approvals_for, approvals_of, unknown_outcomes_for
from approvals.standing import max_days
from keelgate.errors import KeelgateError
from runs.agents import ToolCard, ToolCards, lookup_label
from tenants.models import ROLE_RANK, Role

__all__ = [
    "InboxEntry",
    "InboxSections",
    "InboxView",
    "approval_entry",
    "inbox_sections",
    "render_entry",
    "role_allows",
    "unknown_entry",
]


def role_allows(role: str | None, needed: str) -> bool:
    """True if ``role`` (a Role value, or None for no membership) is at least ``needed``."""
    return role is not None and ROLE_RANK[Role(role)] >= ROLE_RANK[Role(needed)]


@dataclass(frozen=True)
class InboxEntry:
    """One inbox item as a template shows it, with what this user may do with it."""

    kind: Literal["approval", "unknown"]
    row: Approval | UnknownOutcome
    can_act: bool
    """Approver (approvals) or reconciler (unknown outcomes) in the item's tenant."""
    voted: bool = False
    """This user already approved (four-eyes: someone else must add the second approval)."""
    fields: tuple[EditField, ...] = ()
    """The proposed arguments as an "edit, then approve" form (empty when the schema is unknown)."""
    lookup: str | None = None
    """What the unknown outcome's "Check" button asks ("the brokerage"), or None."""
    approval: Approval | None = None
    """An unknown outcome's call as it was approved (goal, effect, who and when), or None
    when no person approved it (the policy let it run)."""
    upstream: str = ""
    """The MCP upstream the call goes to ("" for an agent whose tools are its own code)."""
    description: str = ""
    """That upstream tool's description, as the upstream wrote it (untrusted: shown escaped)."""

    @property
    def standing_offer(self) -> bool:
        """The approve form offers "and approve the same from now on" (never for high impact)."""
        row = self.row
        return self.kind == "approval" and self.can_act and isinstance(row, Approval) and not row.high_impact

    @property
    def standing_days(self) -> float:
        """The longest a standing rule made here may live, in days."""
        return max_days()

    @property
    def dom_id(self) -> str:
        """The element id the live updates find the item by."""
        return f"item-{'a' if self.kind == 'approval' else 'u'}-{self.row.pk}"

    @property
    def sort(self) -> str:
        """The card's place in its section (``data-sort``): the browser inserts new cards by it."""
        return sort_key(self.row)

    @property
    def template(self) -> str:
        return "approvals/_approval.html" if self.kind == "approval" else "approvals/_unknown.html"


def approval_entry(
    row: Approval, *, role: str | None, username: str, cards: ToolCards | None = None
) -> InboxEntry:
    """An approval as ``username`` (with ``role`` in its tenant) sees it (``cards``: the
    page's, so that each agent is built once a page)."""
    voted = any(isinstance(v, dict) and v.get("by") == username for v in row.votes or [])
    can_act = row.decidable_by(role)  # approver, or the role an expiry escalated it to
    card = _card(row, cards)
    fields = tuple(_edit_fields(row, card)) if can_act and not voted else ()
    upstream, description = _upstream_facts(card)
    return InboxEntry(
        "approval",
        row,
        can_act=can_act,
        voted=voted,
        fields=fields,
        upstream=upstream,
        description=description,
    )


def _card(row: Approval | UnknownOutcome, cards: ToolCards | None) -> ToolCard | None:
    """The card facts of the row's tool; None (the card still renders) if the agent is gone."""
    try:
        return (cards or ToolCards()).card(row.agent, row.tool, tenant_id=row.tenant_id)
    except KeelgateError:
        return None


def _upstream_facts(card: ToolCard | None) -> tuple[str, str]:
    """The upstream and the tool's description, for an agent that forwards to one."""
    if card is None or not card.upstream:
        return "", ""
    return card.upstream, card.description


def _edit_fields(row: Approval, card: ToolCard | None) -> list[EditField]:
    """The edit form of a card; none if the agent or schema is gone."""
    try:
        arguments = json.loads(row.arguments)
    except ValueError:
        return []
    return edit_fields(
        None if card is None else card.schema, arguments if isinstance(arguments, dict) else {}
    )


def unknown_entry(
    row: UnknownOutcome,
    *,
    role: str | None,
    approvals: Mapping[tuple[str, str, str], Approval] | None = None,
    cards: ToolCards | None = None,
) -> InboxEntry:
    """An unknown outcome as a user with ``role`` in its tenant sees it, with its call's
    approval (from ``approvals``, read for a page at once by :func:`approvals_of`, else here)."""
    can_act = role_allows(role, Role.RECONCILER)
    label = None
    if can_act:
        try:
            label = lookup_label(row.agent, row.tool)
        except KeelgateError:  # the agent is gone: the card shows without the button
            label = None
    found = approvals if approvals is not None else approvals_of([row])
    approval = found.get((row.tenant_id, row.run_id, row.action_id))
    upstream, description = _upstream_facts(_card(row, cards))
    return InboxEntry(
        "unknown",
        row,
        can_act=can_act,
        lookup=label,
        approval=approval,
        upstream=upstream,
        description=description,
    )


def render_entry(
    entry: InboxEntry,
    *,
    request: HttpRequest | None = None,
    error: str = "",
    values: dict[str, str] | None = None,
    finding: str = "",
) -> str:
    """The item's HTML; with a request, its forms carry the CSRF token and a return path."""
    context: dict[str, Any] = {
        "entry": entry,
        "item": entry.row,
        "error": error,
        "values": values or {},
        "finding": finding,
    }
    if request is not None:
        # Where a plain (no-JS) post returns to: the page the form was shown on.
        context["next"] = (
            request.POST.get("next", "") if request.method == "POST" else request.get_full_path()
        )
    return render_to_string(entry.template, context, request=request)


@dataclass(frozen=True)
class InboxView:
    """What one inbox page shows: a filter and a cursor per section (None: the first page)."""

    filter: InboxFilter
    after: str | None = None
    """The approvals section's cursor."""
    unknown_after: str | None = None
    """The unknown outcomes section's cursor."""

    @classmethod
    def parse(cls, query: Mapping[str, Any]) -> InboxView:
        def cursor(name: str) -> str | None:
            value = query.get(name)
            return value[:512] if isinstance(value, str) and value else None

        return cls(InboxFilter.parse(query), cursor("after"), cursor("uafter"))

    def query(self, **extra: str | None) -> str:
        """This view's query string with ``extra`` changed (None removes a key)."""
        cursors = {"after": self.after, "uafter": self.unknown_after}
        return self.filter.query(**{**cursors, **extra})


@dataclass(frozen=True)
class InboxSections:
    """Both sections of one inbox page, as ``username`` sees them."""

    approvals: list[InboxEntry]
    unknowns: list[InboxEntry]
    approvals_page: Page
    unknowns_page: Page
    approvals_total: int
    unknowns_total: int
    oldest: datetime | None

    @property
    def counts(self) -> dict[str, int]:
        """The totals in the shape of the navigation badges (the same numbers when unfiltered)."""
        return {"approvals": self.approvals_total, "unknown": self.unknowns_total}


@dataclass(frozen=True)
class InboxNumbers:
    """The numbers an inbox page shows around its cards: each section's total under the
    filter and the oldest wait (the summary line), kept current by the live stream."""

    approvals_total: int
    unknowns_total: int
    oldest: datetime | None


def inbox_numbers(*, tenant_ids: list[str], view: InboxView, now: datetime) -> InboxNumbers:
    """Both totals under ``view``'s filter and the oldest wait: two queries."""
    a_total = approvals_total(view.filter.approvals(approvals_for(tenant_ids=tenant_ids), now=now))
    u_total = unknowns_total(view.filter.unknowns(unknown_outcomes_for(tenant_ids=tenant_ids)))
    waits = [at for at in (a_total.oldest, u_total.oldest) if at is not None]
    return InboxNumbers(a_total.count, u_total.count, min(waits) if waits else None)


def inbox_sections(
    *, roles: Mapping[str, str | None], username: str, view: InboxView, now: datetime
) -> InboxSections:
    """The page's cards in queue order, its totals under the filter and the oldest wait.

    A bounded number of queries whatever the inbox holds: two pages, two totals, the
    approvals of the unknown outcomes shown, and one per MCP upstream whose calls are shown
    (its tools: the cards' descriptions and forms). The page and the websocket consumer both
    render through this.
    """
    ids = list(roles)
    approvals = view.filter.approvals(approvals_for(tenant_ids=ids), now=now)
    unknowns = view.filter.unknowns(unknown_outcomes_for(tenant_ids=ids))
    a_page = approvals_page(approvals, cursor=view.after)
    u_page = unknowns_page(unknowns, cursor=view.unknown_after)
    numbers = inbox_numbers(tenant_ids=ids, view=view, now=now)
    asked = approvals_of(u_page.rows)
    cards = ToolCards()
    return InboxSections(
        approvals=[
            approval_entry(r, role=roles.get(r.tenant_id), username=username, cards=cards)
            for r in a_page.rows
        ],
        unknowns=[
            unknown_entry(r, role=roles.get(r.tenant_id), approvals=asked, cards=cards) for r in u_page.rows
        ],
        approvals_page=a_page,
        unknowns_page=u_page,
        approvals_total=numbers.approvals_total,
        unknowns_total=numbers.unknowns_total,
        oldest=numbers.oldest,
    )
