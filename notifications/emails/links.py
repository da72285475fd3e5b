"""Links to decide from an email: one per approval and recipient, used once, bound to the call.

A message lists each approval its recipient may decide with a link of their own
(:func:`links_for`). Opening it (:func:`link_open`, a GET) changes nothing: after the
console's login, as that recipient, it shows the call and a form; the decision
(:func:`link_decide`, a POST) is ``approvals.services.approval_decide``, the console's
own service (roles, four-eyes, the high-impact confirmation), given the arguments hash
the link was made for, so a call edited since is refused as stale.

**Why a stored hash, not a signed token.** A link must work once, and for one person:
single use needs a row to mark whatever the token is, so Django's signing would add a
key to rotate and a nonce row, where a random token and the row already do both. As for
invitations (``tenants.models.Invitation``), the token is 32 random bytes sent in the
message and nowhere else; the row (:class:`~notifications.models.DecisionLink`) keeps
its sha256, the recipient, the approval and the arguments hash. A leaked table decides
nothing; a forged or altered token finds no row.

**Single use.** A decision first claims the link (one conditional UPDATE of
``used_at``), then decides; a refused decision (a deny without a reason, a missing
confirmation, a call decided meanwhile) releases it. Two posts at once: one claims, the
other is told the link was used. A process that dies between the claim and the
decision's commit leaves the link used and nothing decided: the person decides in the
console (fail closed, never twice).

**Refusals are audited** (``approval.link_refused``) when they say something about who
holds a link: a signed-in person who is not its recipient opened it or posted its form
(``not_yours``); its recipient posted a decision on a link used already (``used``), or
with a role that no longer decides the call (``not_allowed``). The recipient opening
their own spent link again, or a link to an item decided, edited or expired meanwhile,
is the ordinary end of a link: its page says so, without an event. An unknown token
names no tenant, so it has no chain to be written to; it is logged without the token.

Tokens look like ``kgl_<43 characters>``, a shape :mod:`sitekit.logs` redacts from
every log line (the access log of ``/link/<token>/``, Django's "Not Found" lines, the
login's ``next``).
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from django.conf import settings
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from approvals.models import Approval, ApprovalStatus
from approvals.services import approval_decide
from audit.wiring import audit_log
from notifications.emails.message import LIST_LIMIT, WaitingItem, console_url
from notifications.models import DecisionLink
from tenants.access import role_in
from tenants.auditing import email_link_context
from tenants.ratelimit import client_address

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django.http import HttpRequest

log = logging.getLogger("keelgate.email")

TOKEN_PREFIX = "kgl_"
TOKEN_MAX = 100
"""A token longer than this is not one of ours: no lookup."""
LINK_HOURS = 72.0
"""``KEELGATE_EMAIL_LINK_HOURS``'s default: how long a link works at most, if its approval waits on."""
KEEP_EXPIRED = timedelta(days=7)
"""Rows past their expiry are deleted after this (a link that old says "unknown" instead of "expired")."""
REFUSED = "approval.link_refused"

Problem = Literal[
    "", "unknown", "not_yours", "used", "expired", "decided", "edited", "changed", "not_allowed"
]
AUDITED_OPEN: frozenset[str] = frozenset({"not_yours"})
"""The refusals of a GET written to the tenant's chain (the module's docstring says why these)."""
AUDITED_ATTEMPT: frozenset[str] = frozenset({"not_yours", "used", "not_allowed"})
"""The refusals of a POST (an attempt to decide) written to the tenant's chain."""


@dataclass(frozen=True)
class Opened:
    """What a link leads to for the person who opened it: its call, or why not.

    ``approval`` is set only for the link's own recipient: nobody else learns anything
    of the call, not even its tool.
    """

    problem: Problem
    link: DecisionLink | None = None
    approval: Approval | None = None


def link_lifetime() -> timedelta:
    """``KEELGATE_EMAIL_LINK_HOURS``: a link stops working this long after its message was made."""
    return timedelta(hours=float(getattr(settings, "KEELGATE_EMAIL_LINK_HOURS", LINK_HOURS)))


def token_hash(token: str) -> str:
    """The sha256 (hex) stored for ``token``."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def links_for(*, user: User, items: list[WaitingItem], now: datetime) -> list[WaitingItem]:
    """``items`` with a new decision link for each approval the message shows, made for ``user``.

    The items are those ``user`` may decide (:func:`notifications.emails.items.waiting_items`
    checked their role and vote just now); an unknown outcome gets no link (a reconcile
    needs what the person found, in the console). Each send makes new links, so a message
    sent again after a crash carries links of its own; the earlier ones expire unused.
    """
    shown = {i.id for i in [i for i in items if i.kind == "approval"][:LIST_LIMIT]}
    if not shown:
        return items
    hashes = dict(
        Approval.objects.filter(pk__in=shown, status=ApprovalStatus.PENDING).values_list(
            "pk", "arguments_hash"
        )
    )
    expires = now + link_lifetime()
    made: dict[int, str] = {}
    rows = []
    for pk, arguments_hash in hashes.items():
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        made[pk] = console_url() + reverse("decision-link", args=[token])
        rows.append(
            DecisionLink(
                token_hash=token_hash(token),
                user=user,
                approval_id=pk,
                arguments_hash=arguments_hash,
                created_at=now,
                expires_at=expires,
            )
        )
    with transaction.atomic():
        DecisionLink.objects.bulk_create(rows)
        DecisionLink.objects.filter(expires_at__lt=now - KEEP_EXPIRED).delete()
    return [replace(i, decide_link=made[i.id]) if i.kind == "approval" and i.id in made else i for i in items]


def link_open(
    *, token: str, user: Any, request: HttpRequest | None = None, attempt: bool = False, audit: bool = True
) -> Opened:
    """What ``token``'s link shows ``user`` now; changes nothing but the audit of a refusal.

    ``attempt``: the person posted a decision (more refusals are audited then);
    ``audit`` off: the page is shown again after a refusal already told.

    In this order: unknown (or altered) token; another person's link; a recipient no
    longer in the call's tenant (told nothing more); used; expired (its
    own lifetime, or the approval's deadline); the call edited, decided or changed since
    the message; the recipient's role no longer decides it (or they already voted on a
    four-eyes call). Otherwise the call, for its confirmation page.
    """
    link = _find(token)
    if link is None:
        log.info("email link: an unknown link was opened by %s", user.get_username())
        return Opened("unknown")
    if link.user_id != user.pk:
        return _refused(Opened("not_yours", link), user, request, _audited(audit, attempt))
    approval = link.approval
    role = role_in(user, approval.tenant_id)
    if role is None:  # no longer a member: the tenant's calls are none of their business
        return _refused(Opened("not_allowed", link), user, request, _audited(audit, attempt))
    if link.used_at is not None:
        return _refused(Opened("used", link, approval), user, request, _audited(audit, attempt))
    now = timezone.now()
    past_deadline = approval.expires_at is not None and approval.expires_at <= now
    if (
        link.expires_at <= now
        or approval.status == ApprovalStatus.EXPIRED
        or (approval.status == ApprovalStatus.PENDING and past_deadline)
    ):
        return Opened("expired", link, approval)
    if approval.replaced_by:
        return Opened("edited", link, approval)
    if approval.status != ApprovalStatus.PENDING:
        return Opened("decided", link, approval)
    if approval.arguments_hash != link.arguments_hash:
        return Opened("changed", link, approval)
    username = user.get_username()
    voted = any(isinstance(v, dict) and v.get("by") == username for v in approval.votes or [])
    if voted or not approval.decidable_by(role):
        return _refused(Opened("not_allowed", link, approval), user, request, _audited(audit, attempt))
    return Opened("", link, approval)


@dataclass(frozen=True)
class Decided:
    """What a post on a link did: ``approval`` as decided, or ``opened.problem`` why nothing was."""

    opened: Opened
    approval: Approval | None = None


def link_decide(
    *,
    token: str,
    user: Any,
    decision: Literal["approve", "deny"],
    note: str = "",
    confirmed: bool = False,
    request: HttpRequest,
) -> Decided:
    """Decide the link's approval as ``user``, once, through the console's own service.

    The link is checked as :func:`link_open` checks it, then claimed, then the approval
    decided with the arguments hash the link was made for (``seen``) and ``via``
    ``email`` with the link's id (``tenants.auditing.email_link_context``). The service's
    refusals (a missing reason or confirmation, the call changed or decided meanwhile,
    the role) are raised as the console gets them, the claim released first.
    """
    opened = link_open(token=token, user=user, request=request, attempt=True)
    if opened.problem or opened.link is None or opened.approval is None:
        return Decided(opened)
    link, approval = opened.link, opened.approval
    claimed = timezone.now()
    if not DecisionLink.objects.filter(pk=link.pk, used_at__isnull=True).update(
        used_at=claimed, decision=decision
    ):
        return Decided(_refused(Opened("used", link, approval), user, request, AUDITED_ATTEMPT))
    try:
        decided = approval_decide(
            tenant_id=approval.tenant_id,
            approval_id=approval.pk,
            user=user,
            decision=decision,
            note=note,
            seen=link.arguments_hash,
            confirmed=confirmed,
            context=email_link_context(request, link_id=link.pk),
        )
    except Exception:
        DecisionLink.objects.filter(pk=link.pk, used_at=claimed).update(used_at=None, decision="")
        raise
    return Decided(Opened("", link, approval), decided)


def _find(token: str) -> DecisionLink | None:
    if not token.startswith(TOKEN_PREFIX) or len(token) > TOKEN_MAX:
        return None
    return (
        DecisionLink.objects.select_related("approval", "user").filter(token_hash=token_hash(token)).first()
    )


def _audited(audit: bool, attempt: bool) -> frozenset[str]:
    if not audit:
        return frozenset()
    return AUDITED_ATTEMPT if attempt else AUDITED_OPEN


def _refused(opened: Opened, user: Any, request: HttpRequest | None, audited: frozenset[str]) -> Opened:
    """``opened``, after writing its refusal to the approval's chain if it is one worth auditing.

    For another person than the recipient, the answer carries no approval: their page
    must say nothing of the call.
    """
    link = opened.link
    assert link is not None
    approval = link.approval
    if opened.problem in audited:
        body: dict[str, Any] = {
            "run_id": approval.run_id,
            "action_id": approval.action_id,
            "tool": approval.tool,
            "link_id": link.pk,
            "reason": opened.problem,
            "recipient": link.user.get_username(),
        }
        if request is not None:
            body["address"] = client_address(request) or "unknown"
        audit_log().append(approval.tenant_id, actor=user.get_username(), kind=REFUSED, body=body)
    if opened.problem == "not_yours":
        return Opened("not_yours")
    return opened
