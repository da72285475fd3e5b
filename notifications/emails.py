"""Email about what waits for a person: pending approvals and unknown outcomes.

Each pass of ``keelgate_notify`` does two things.

1. **Queue** (:func:`queue_due`). Read each tenant's audit chain past its
   :class:`~notifications.models.EmailCursor` (the chain is the outbox, as for the live
   push: an event is visible exactly when its change commits). ``approval.requested``,
   ``approval.edited`` (the edited call may still wait for a second approver),
   ``approval.escalated`` (its deadline handed it to a higher role) and a
   ``gateway.call`` whose status is ``unknown`` name new items. Each still-waiting item
   goes to everyone whose role in its tenant can decide it (approver and up for an
   approval, the escalation role and up once escalated, reconciler and up for an
   unknown outcome) and who is active with an address; all of a
   person's new items, across their tenants, become one :class:`EmailBatch` row. The
   cursors move in that same transaction, so a pass that dies queues nothing and moves
   nothing, and the next pass reads the same stretch again.
2. **Send** (:func:`send_queued`). Claim the due batches (a conditional UPDATE with a
   lease), merge each person's into ONE message, re-read every item (one decided
   meanwhile, or in a tenant where the person lost the role, is left out), send, then
   mark the batches finished.

The send is **at least once**: a sender that dies after the SMTP server accepted a
message and before it recorded that, leaves the claim to expire (``CLAIM``), and the
message is sent again. The opposite order (record, then send) would be at most once
and a crash would lose the message silently; for an approval that means a run blocked
until someone happens to look, so a rare duplicate is the better failure.

Several processes may run at once: the queue step locks the cursors it works on
(``SELECT ... FOR UPDATE SKIP LOCKED`` on PostgreSQL; SQLite's IMMEDIATE transactions
serialise it) and moves each with a conditional UPDATE; the send step claims batches
with one. A pass with nothing new takes no write lock.

What a message says is the tool, tenant, run, how long it has waited and links to the
console (``KEELGATE_CONSOLE_URL``); never the arguments or the goal, which are
untrusted and may be sensitive.
"""

from __future__ import annotations

import json
import logging
import secrets
import smtplib
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.mail import EmailMultiAlternatives, get_connection
from django.core.mail.backends.base import BaseEmailBackend
from django.db import transaction
from django.db.models import Q
from django.template.loader import render_to_string
from django.urls import NoReverseMatch, reverse
from django.utils import timezone

from approvals.models import Approval, ApprovalStatus, UnknownOutcome
from approvals.selectors import approvals_for, unknown_outcomes_for
from audit.models import AuditEvent
from audit.selectors import audit_heads
from notifications.models import EmailBatch, EmailBatchOutcome, EmailCursor
from tenants.models import Membership, Role, Tenant

if TYPE_CHECKING:
    from django.contrib.auth.models import User

__all__ = ["WaitingItem", "queue_due", "send_due", "send_queued"]

log = logging.getLogger("keelgate.email")

KINDS = ("approval.requested", "approval.edited", "approval.escalated", "gateway.call")
"""The chain events that can name a new item."""
EVENTS_PER_PASS = 5000
"""Per tenant and pass; a longer backlog is read over several passes."""
LIST_LIMIT = 200
"""A message lists at most this many items, then says how many more wait."""
SEND_LIMIT = 1000
"""Batches one pass claims."""
MAX_UNRESOLVED = 1000
CLAIM = timedelta(minutes=5)
"""A sender silent this long after claiming is presumed dead; its batches are sent again."""
MAX_ATTEMPTS = 10
KEEP_FINISHED = timedelta(days=7)

Ref = tuple[str, str, str]
"""An item as the chain names it: ``(kind, run_id, action_id)``, kind ``approval`` or ``unknown``."""
Item = Approval | UnknownOutcome


def enabled() -> bool:
    """``KEELGATE_EMAIL_ENABLED``: off, a pass does nothing (and moves no cursor)."""
    return bool(getattr(settings, "KEELGATE_EMAIL_ENABLED", False))


def send_due() -> int:
    """One pass: queue what the chains announced, send what is due. Messages sent."""
    if not enabled():
        return 0
    queue_due()
    return send_queued()


# -- queue: the chain into batches -----------------------------------------------------


class _CursorMoved(Exception):
    """Another pass moved a cursor first: roll this one back, the other has it."""


def queue_due(*, now: datetime | None = None) -> int:
    """Read every tenant's chain past its cursor and queue one batch per person. Batches queued."""
    now = now or timezone.now()
    tenants = list(Tenant.objects.values_list("slug", flat=True))
    heads = audit_heads(tenants)
    known = {c.tenant_id: c for c in EmailCursor.objects.filter(tenant_id__in=tenants)}
    busy = [
        t
        for t in tenants
        if heads[t] > (known[t].seq if t in known else 0) or (t in known and known[t].unresolved)
    ]
    if not busy:
        return 0
    try:
        with transaction.atomic():
            EmailCursor.objects.bulk_create(
                [EmailCursor(tenant_id=t) for t in busy if t not in known], ignore_conflicts=True
            )
            cursors = list(EmailCursor.objects.select_for_update(skip_locked=True).filter(tenant_id__in=busy))
            waiting: list[Item] = []
            for cursor in cursors:
                refs, seq = _new_refs(cursor.tenant_id, cursor.seq, heads[cursor.tenant_id])
                found, unresolved = _resolve(cursor.tenant_id, refs, cursor.unresolved, now)
                waiting += found
                moved = EmailCursor.objects.filter(tenant_id=cursor.tenant_id, seq=cursor.seq).update(
                    seq=seq, unresolved=unresolved, updated_at=now
                )
                if not moved:
                    raise _CursorMoved(cursor.tenant_id)
            batches = [
                EmailBatch(user_id=user_id, items=items, created_at=now, due_at=now)
                for user_id, items in _per_person(waiting).items()
            ]
            EmailBatch.objects.bulk_create(batches)
    except _CursorMoved:
        return 0
    return len(batches)


def _new_refs(tenant_id: str, after: int, head: int) -> tuple[list[Ref], int]:
    """The items named by the tenant's events in ``(after, head]``, and where the cursor goes."""
    rows = list(
        AuditEvent.objects.filter(tenant_id=tenant_id, seq__gt=after, seq__lte=head, kind__in=KINDS)
        .order_by("seq")
        .values_list("seq", "kind", "body")[:EVENTS_PER_PASS]
    )
    refs = [ref for _, kind, body in rows if (ref := _ref(kind, body)) is not None]
    seq = rows[-1][0] if len(rows) == EVENTS_PER_PASS else max(after, head)
    return refs, seq


def _ref(kind: str, body: str) -> Ref | None:
    try:
        data = json.loads(body)
    except ValueError:  # a damaged row is the verifier's business
        return None
    if not isinstance(data, dict):
        return None
    if kind in ("approval.requested", "approval.escalated"):
        ref = ("approval", data.get("run_id"), data.get("action_id"))
    elif kind == "approval.edited":
        ref = ("approval", data.get("run_id"), data.get("new_action_id"))
    elif kind == "gateway.call" and data.get("status") == "unknown":
        ref = ("unknown", data.get("run_id"), data.get("action_id"))
    else:
        return None
    return ref if isinstance(ref[1], str) and isinstance(ref[2], str) else None  # type: ignore[return-value]


def _resolve(
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


def _per_person(waiting: list[Item]) -> dict[int, list[dict[str, Any]]]:
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


# -- send: batches into messages ------------------------------------------------------


@dataclass(frozen=True)
class WaitingItem:
    """One line of a message: only what is safe to mail (never arguments or the goal)."""

    kind: str
    tool: str
    tenant_id: str
    run_id: str
    since: datetime
    link: str
    run_link: str


def send_queued(*, now: datetime | None = None) -> int:
    """Send every due batch, one message per person. Messages sent."""
    now = now or timezone.now()
    due = EmailBatch.objects.filter(finished_at=None, due_at__lte=now).filter(
        Q(claimed_until=None) | Q(claimed_until__lt=now)
    )
    ids = list(due.order_by("pk").values_list("pk", flat=True)[:SEND_LIMIT])
    if not ids:
        return 0
    token = secrets.token_hex(16)
    due.filter(pk__in=ids).update(claim_token=token, claimed_until=now + CLAIM)
    people: dict[int, list[EmailBatch]] = defaultdict(list)
    for batch in EmailBatch.objects.filter(claim_token=token, finished_at=None).select_related("user"):
        people[batch.user_id].append(batch)
    sent = 0
    connection, opened = get_connection(fail_silently=False), False
    try:
        for position, batches in enumerate(people.values()):
            user = batches[0].user
            items = waiting_items(user=user, refs=[item for b in batches for item in b.items])
            if not items:
                _finish(batches, token, EmailBatchOutcome.NOTHING_LEFT)
                continue
            try:
                if not opened:  # one connection for the pass (send_messages alone opens one per call)
                    connection.open()
                    opened = True
                if not connection.send_messages([_message(user, items, connection)]):
                    raise smtplib.SMTPException("not sent")
            except (smtplib.SMTPRecipientsRefused, smtplib.SMTPSenderRefused, smtplib.SMTPDataError) as exc:
                _retry(batches, token, _error(exc))  # this message only; the others go on
                continue
            except (smtplib.SMTPException, OSError) as exc:
                # The server is down or hung up: try again later, everyone.
                _retry(batches, token, _error(exc))
                rest = [b for later in list(people.values())[position + 1 :] for b in later]
                _retry(rest, token, "", count=False)
                log.warning("email: the mail server failed (%s); retrying later", _error(exc))
                break
            _finish(batches, token, EmailBatchOutcome.SENT)
            sent += 1
    finally:
        connection.close()
    EmailBatch.objects.filter(finished_at__lt=now - KEEP_FINISHED).delete()
    return sent


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
    items = [_item(row) for row in rows if _decides(row, roles[row.tenant_id])]
    return sorted(items, key=lambda i: (i.since, i.kind, i.link))


def _item(row: Item) -> WaitingItem:
    kind, since = (
        ("approval", row.requested_at) if isinstance(row, Approval) else ("unknown", row.detected_at)
    )
    base = str(getattr(settings, "KEELGATE_CONSOLE_URL", "http://127.0.0.1:8000")).rstrip("/")
    link = f"{base}{reverse('inbox')}#item-{kind[0]}-{row.pk}"
    try:
        run_link = base + reverse("run", kwargs={"tenant_id": row.tenant_id, "run_id": row.run_id})
    except NoReverseMatch:  # an id no URL can carry: the inbox link still finds it
        run_link = link
    return WaitingItem(
        kind, _one_line(row.tool), _one_line(row.tenant_id), _one_line(row.run_id), since, link, run_link
    )


def _one_line(text: str) -> str:
    """Untrusted text on one line: a newline in a tool or run name must not forge a line."""
    return "".join(ch if ch.isprintable() else "\ufffd" for ch in text[:200])


def _message(user: User, items: list[WaitingItem], connection: BaseEmailBackend) -> EmailMultiAlternatives:
    approvals = [i for i in items if i.kind == "approval"]
    unknowns = [i for i in items if i.kind == "unknown"]
    base = str(getattr(settings, "KEELGATE_CONSOLE_URL", "http://127.0.0.1:8000")).rstrip("/")
    context = {
        "username": user.get_username(),
        "approvals": approvals[:LIST_LIMIT],
        "unknowns": unknowns[: max(0, LIST_LIMIT - len(approvals))],
        "approval_count": len(approvals),
        "unknown_count": len(unknowns),
        "more": max(0, len(items) - LIST_LIMIT),
        "inbox": base + reverse("inbox"),
    }
    message = EmailMultiAlternatives(
        subject=f"Keelgate: {_counted(len(approvals), 'approval')}"
        f"{' and ' if approvals and unknowns else ''}{_counted(len(unknowns), 'unknown outcome')}"
        f" wait{'s' if len(items) == 1 else ''} for you",
        body=render_to_string("notifications/waiting_email.txt", context),
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=[user.email],
        connection=connection,
        headers={"Auto-Submitted": "auto-generated", "X-Auto-Response-Suppress": "All"},
    )
    message.attach_alternative(render_to_string("notifications/waiting_email.html", context), "text/html")
    return message


def _counted(n: int, noun: str) -> str:
    return "" if n == 0 else f"{n} {noun}{'' if n == 1 else 's'}"


def _error(exc: Exception) -> str:
    """What to record of a failure: the SMTP code or the exception's class, never an address."""
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        codes = sorted({str(code) for code, _ in exc.recipients.values()})
        return f"recipient refused {','.join(codes)}"
    code = getattr(exc, "smtp_code", None)
    return f"{type(exc).__name__} {code}" if code else type(exc).__name__


def _finish(batches: list[EmailBatch], token: str, outcome: str) -> None:
    EmailBatch.objects.filter(pk__in=[b.pk for b in batches], claim_token=token).update(
        finished_at=timezone.now(), outcome=outcome, claim_token="", claimed_until=None
    )


def _retry(batches: list[EmailBatch], token: str, error: str, *, count: bool = True) -> None:
    """Release the claim; send again after a back-off (1 min doubling to 1 h), or give up."""
    now = timezone.now()
    for batch in batches:
        attempts = batch.attempts + (1 if count else 0)
        wait = timedelta(seconds=min(60 * 2 ** max(attempts - 1, 0), 3600))
        gave_up = attempts >= MAX_ATTEMPTS
        if gave_up:
            log.error(
                "email: batch %s to user %s given up after %s attempts", batch.pk, batch.user_id, attempts
            )
        EmailBatch.objects.filter(pk=batch.pk, claim_token=token).update(
            attempts=attempts,
            due_at=now + wait,
            claim_token="",
            claimed_until=None,
            last_error=(error or batch.last_error)[:200],
            finished_at=now if gave_up else None,
            outcome=EmailBatchOutcome.GAVE_UP if gave_up else "",
        )
