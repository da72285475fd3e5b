"""The items email is about: pending approvals and unknown outcomes, and who may decide each.

At queue time the chain names items (:func:`refs_of`); each ref is looked up in the
inbox (:func:`resolve`), and each still-waiting one goes to everyone whose role in its
tenant can decide it (approver and up for an approval, the escalation role and up once
escalated, reconciler and up for an unknown outcome) and who is active with an address
(:func:`per_person`). At send time the items are read again (:func:`waiting_items`): one
decided meanwhile, or in a tenant where the person lost the role, is left out.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings

from approvals.models import Approval, ApprovalStatus, UnknownOutcome
from approvals.selectors import approvals_for, unknown_outcomes_for
from notifications.channel import ChainEvent
from notifications.emails.message import WaitingItem, waiting_item
from tenants.models import Membership, Role

if TYPE_CHECKING:
    from django.contrib.auth.models import User

log = logging.getLogger("keelgate.email")

KINDS = frozenset({"approval.requested", "approval.edited", "approval.escalated", "gateway.call"})
"""The chain events that can name a new item."""
MAX_UNRESOLVED = 1000

Ref = tuple[str, str, str]
"""An item as the chain names it: ``(kind, run_id, action_id)``, kind ``approval`` or ``unknown``."""
Item = Approval | UnknownOutcome


def refs_of(events: list[ChainEvent]) -> list[Ref]:
    """The items the events name, in chain order."""
    return [ref for event in events if (ref := _ref(event.kind, event.body)) is not None]


def _ref(kind: str, data: dict[str, Any]) -> Ref | None:
    if kind in ("approval.requested", "approval.escalated"):
        ref = ("approval", data.get("run_id"), data.get("action_id"))
    elif kind == "approval.edited":  # the edited call may still wait for a second approver
        ref = ("approval", data.get("run_id"), data.get("new_action_id"))
    elif kind == "gateway.call" and data.get("status") == "unknown":
        ref = ("unknown", data.get("run_id"), data.get("action_id"))
    else:
        return None
    return ref if isinstance(ref[1], str) and isinstance(ref[2], str) else None  # type: ignore[return-value]


def resolve(
    tenant_id: str, refs: list[Ref], unresolved: list[dict[str, Any]], now: datetime
) -> tuple[list[Item], list[dict[str, Any]]]:
    """The refs' inbox rows that still wait, and the refs whose row is not committed yet.

    The gateway's event can commit before the checkpoint that projects its inbox row
    (an unknown outcome is recorded at the next save), so a ref without a row is looked
    up again next pass, until ``KEELGATE_EMAIL_UNRESOLVED_SECONDS`` (a run that crashed
    before that save names the item again when it resumes).
    """
    since: dict[Ref, str] = {}
    for entry in unresolved:
        since[(entry["kind"], entry["run_id"], entry["action_id"])] = entry["since"]
    for ref in refs:
        since.setdefault(ref, now.isoformat())
    rows: dict[Ref, Item] = {}
    fields = ("pk", "tenant_id", "run_id", "action_id")
    approvals = {ref[2] for ref in since if ref[0] == "approval"}
    if approvals:
        found = Approval.objects.filter(tenant_id=tenant_id, action_id__in=approvals)
        for a in found.only(*fields, "status", "escalated_to"):
            rows[("approval", a.run_id, a.action_id)] = a
    unknowns = {ref[2] for ref in since if ref[0] == "unknown"}
    if unknowns:
        for u in UnknownOutcome.objects.filter(tenant_id=tenant_id, action_id__in=unknowns).only(
            *fields, "settled"
        ):
            rows[("unknown", u.run_id, u.action_id)] = u
    waiting: dict[Ref, Item] = {}
    still: list[dict[str, Any]] = []
    grace = timedelta(seconds=float(getattr(settings, "KEELGATE_EMAIL_UNRESOLVED_SECONDS", 600)))
    for ref, first_seen in since.items():
        row = rows.get(ref)
        if row is not None:
            if _waits(row):
                waiting[ref] = row
        elif now - datetime.fromisoformat(first_seen) < grace:
            still.append({"kind": ref[0], "run_id": ref[1], "action_id": ref[2], "since": first_seen})
        else:
            log.info("email: %s %s/%s has no inbox row; not mailed", ref[0], tenant_id, ref[1])
    return list(waiting.values()), still[-MAX_UNRESOLVED:]


def per_person(waiting: list[Item]) -> dict[int, list[dict[str, Any]]]:
    """Each person's items: those their role in the item's tenant can decide."""
    by_tenant: dict[str, list[Item]] = defaultdict(list)
    for row in waiting:
        by_tenant[row.tenant_id].append(row)
    members = (
        Membership.objects.filter(tenant__slug__in=list(by_tenant), user__is_active=True)
        .exclude(role=Role.VIEWER)
        .exclude(user__email="")
        .order_by("user_id", "tenant__slug")
        .values_list("user_id", "tenant__slug", "role")
    )
    items: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for user_id, tenant_id, role in members:
        items[user_id] += [_ref_of(row) for row in by_tenant[tenant_id] if _decides(row, role)]
    return {user_id: found for user_id, found in items.items() if found}


def waiting_items(*, user: User, refs: list[dict[str, Any]]) -> list[WaitingItem]:
    """The refs' items that still wait and that ``user`` may still decide, longest waiting first."""
    roles = dict(Membership.objects.filter(user=user).values_list("tenant__slug", "role"))
    username = user.get_username()
    approvals = approvals_for(tenant_ids=roles).filter(
        pk__in=[r["id"] for r in refs if r.get("kind") == "approval"]
    )
    unknowns = unknown_outcomes_for(tenant_ids=roles).filter(
        pk__in=[r["id"] for r in refs if r.get("kind") == "unknown"]
    )
    fields = ("pk", "tool", "tenant_id", "run_id")
    rows: list[Item] = [
        a
        for a in approvals.only(*fields, "requested_at", "votes", "escalated_to")
        # Four eyes: who already approved waits for someone else, not for themselves.
        if not any(isinstance(v, dict) and v.get("by") == username for v in a.votes or [])
    ]
    rows += list(unknowns.only(*fields, "detected_at", "settled"))
    items = [_waiting_item(row) for row in rows if _decides(row, roles[row.tenant_id])]
    return sorted(items, key=lambda i: (i.since, i.kind, i.link))


def _waits(row: Item) -> bool:
    if isinstance(row, Approval):
        return row.status == ApprovalStatus.PENDING
    return not row.settled


def _decides(row: Item, role: str) -> bool:
    """True if a member with ``role`` may decide the item (an escalated approval: its role only)."""
    if isinstance(row, Approval):
        return row.decidable_by(role)
    return Membership(role=role).allows(Role.RECONCILER)


def _ref_of(row: Item) -> dict[str, Any]:
    return {"kind": "approval" if isinstance(row, Approval) else "unknown", "id": row.pk}


def _waiting_item(row: Item) -> WaitingItem:
    if isinstance(row, Approval):
        return waiting_item("approval", row.pk, row.tool, row.tenant_id, row.run_id, row.requested_at)
    return waiting_item("unknown", row.pk, row.tool, row.tenant_id, row.run_id, row.detected_at)
