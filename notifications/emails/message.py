"""One email to one person: what is safe to say about each waiting item, rendered in two parts.

What a message says is the tool, tenant, run, how long it has waited and links to the
console (``KEELGATE_CONSOLE_URL``), with, for an approval, the person's own link to decide
it (:mod:`notifications.emails.links`); never the arguments or the goal, which are
untrusted and may be sensitive. Untrusted names are put on one line, so a newline in a
run id cannot forge a line of the plain text part; the HTML part is escaped by the
template engine.
"""

from __future__ import annotations

import smtplib
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from django.conf import settings
from django.core.mail import EmailMultiAlternatives
from django.core.mail.backends.base import BaseEmailBackend
from django.template.loader import render_to_string
from django.urls import NoReverseMatch, reverse

if TYPE_CHECKING:
    from django.contrib.auth.models import User

LIST_LIMIT = 200
"""A message lists at most this many items, then says how many more wait."""


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
    id: int = 0
    """The inbox row's id."""
    decide_link: str = ""
    """This person's link to decide it from the message (an approval they may decide), or ""."""


def waiting_item(kind: str, pk: int, tool: str, tenant_id: str, run_id: str, since: datetime) -> WaitingItem:
    """The line for one inbox row: links to its card in the inbox and to its run."""
    base = _console()
    link = f"{base}{reverse('inbox')}#item-{kind[0]}-{pk}"
    try:
        run_link = base + reverse("run", kwargs={"tenant_id": tenant_id, "run_id": run_id})
    except NoReverseMatch:  # an id no URL can carry: the inbox link still finds it
        run_link = link
    return WaitingItem(
        kind, _one_line(tool), _one_line(tenant_id), _one_line(run_id), since, link, run_link, id=pk
    )


def message(user: User, items: list[WaitingItem], connection: BaseEmailBackend) -> EmailMultiAlternatives:
    """The message telling ``user`` what waits for them, plain text and HTML."""
    approvals = [i for i in items if i.kind == "approval"]
    unknowns = [i for i in items if i.kind == "unknown"]
    context = {
        "username": user.get_username(),
        "approvals": approvals[:LIST_LIMIT],
        "unknowns": unknowns[: max(0, LIST_LIMIT - len(approvals))],
        "approval_count": len(approvals),
        "unknown_count": len(unknowns),
        "more": max(0, len(items) - LIST_LIMIT),
        "inbox": _console() + reverse("inbox"),
    }
    mail = EmailMultiAlternatives(
        subject=f"Keelgate: {_counted(len(approvals), 'approval')}"
        f"{' and ' if approvals and unknowns else ''}{_counted(len(unknowns), 'unknown outcome')}"
        f" wait{'s' if len(items) == 1 else ''} for you",
        body=render_to_string("notifications/waiting_email.txt", context),
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=[user.email],
        connection=connection,
        headers={"Auto-Submitted": "auto-generated", "X-Auto-Response-Suppress": "All"},
    )
    mail.attach_alternative(render_to_string("notifications/waiting_email.html", context), "text/html")
    return mail


def smtp_error(exc: Exception) -> str:
    """What to record of a failure: the SMTP code or the exception's class, never an address."""
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        codes = sorted({str(code) for code, _ in exc.recipients.values()})
        return f"recipient refused {','.join(codes)}"
    code = getattr(exc, "smtp_code", None)
    return f"{type(exc).__name__} {code}" if code else type(exc).__name__


def console_url() -> str:
    """``KEELGATE_CONSOLE_URL``, without a trailing slash: where every link of a message points."""
    return _console()


def _console() -> str:
    return str(getattr(settings, "KEELGATE_CONSOLE_URL", "http://127.0.0.1:8000")).rstrip("/")


def _one_line(text: str) -> str:
    """Untrusted text on one line: a newline in a tool or run name must not forge a line."""
    return "".join(ch if ch.isprintable() else "\ufffd" for ch in text[:200])


def _counted(n: int, noun: str) -> str:
    return "" if n == 0 else f"{n} {noun}{'' if n == 1 else 's'}"
