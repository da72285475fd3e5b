"""What a Slack message says about an item: Block Kit, every untrusted word escaped.

A tool's name, a run's id, the impact line and a note come from agents, tools and
people: each is escaped for Slack's mrkdwn (``&``, ``<``, ``>``, so no mention, link or
``<!channel>`` can be smuggled in) and cut to a length Slack accepts. The message is
drawn from the inbox row as it stands when it is sent, so a post or an update sent late
still tells the truth.

An approval's message carries two decision buttons, **Approve** and **Deny…**, whose
value is only the approval's id and the hash of the arguments shown (``<id>:<hash>``).
Deny opens a form asking for the reason (:mod:`.modals`). A high-impact call has
**Approve…** instead, which opens a form asking for the typed confirmation the console
asks for. An edit opens the console.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.urls import NoReverseMatch, reverse

from approvals.models import Approval, ApprovalStatus, UnknownOutcome
from tenants.models import Role

APPROVE = "keelgate_approve"
"""The one action id a button decides with; every other action id is refused."""
DENY = "keelgate_deny"
"""A button that opens the form asking why (:mod:`.modals`); its submission denies."""
DENY_FORM = "keelgate_deny_reason"
"""The ``callback_id`` of that form."""
CONFIRM = "keelgate_confirm"
"""A high-impact call's Approve…: it opens the form asking for the typed confirmation."""
CONFIRM_FORM = "keelgate_confirm_high_impact"
"""The ``callback_id`` of that form; with ``DENY_FORM``, the only view submissions Keelgate takes."""
OPEN = "keelgate_open"
"""A URL button's action id: Slack reports its click too, and it decides nothing."""

TEXT_MAX = 2900
"""A section's text stays under Slack's 3,000 characters."""
FIELD_MAX = 300

VIA_WORDS = {
    "console": "in the console",
    "api": "through the API",
    "slack": "in Slack",
    "email": "through an emailed link",
    "standing": "through a standing approval",
}

ROLE_WORDS = {
    Role.APPROVER: "approvers and admins",
    Role.RECONCILER: "reconcilers and admins",
    Role.ADMIN: "admins",
}


def escape(text: object, limit: int = FIELD_MAX) -> str:
    """``text`` for Slack's mrkdwn: ``&``, ``<``, ``>`` escaped, backticks neutralised, cut to ``limit``."""
    value = str(text).replace("`", "'")
    if len(value) > limit:
        value = value[: limit - 1] + "…"
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


@dataclass(frozen=True)
class Message:
    """A message's fallback text (notifications, screen readers) and its blocks."""

    text: str
    blocks: list[dict[str, Any]]


def console_url(path: str = "") -> str:
    return str(getattr(settings, "KEELGATE_CONSOLE_URL", "http://127.0.0.1:8000")).rstrip("/") + path


def card_url(kind: str, pk: int) -> str:
    return console_url(f"{reverse('inbox')}#item-{kind[0]}-{pk}")


def _run_url(tenant_id: str, run_id: str) -> str:
    try:
        return console_url(reverse("run", kwargs={"tenant_id": tenant_id, "run_id": run_id}))
    except NoReverseMatch:
        return ""


def _when(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC") if moment is not None else "none"


def _how(actor: str, via: str) -> str:
    said = VIA_WORDS.get(via, f"via {escape(via, 32)}" if via else "")
    return f"{escape(actor, 150)} {said}".strip()


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text[:TEXT_MAX]}}


def _button(text: str, *, action_id: str, value: str = "", url: str = "", style: str = "") -> dict[str, Any]:
    button: dict[str, Any] = {
        "type": "button",
        "text": {"type": "plain_text", "text": text, "emoji": False},
        "action_id": action_id,
    }
    if value:
        button["value"] = value
    if url:
        button["url"] = url
    if style:
        button["style"] = style
    return button


def approval_message(row: Approval, *, actor: str = "", via: str = "") -> Message:
    """The message of an approval as it stands; ``actor`` and ``via``: who settled it and how, if known."""
    tool, run = escape(row.tool, 128), escape(row.run_id, 128)
    heading = f"*{'High-impact call' if row.high_impact else 'Approval'}:* `{tool}` in run `{run}`"
    lines = [heading]
    if row.impact:
        lines.append(f">{escape(row.impact, 500)}")
    fields = [
        f"*Tenant:* {escape(row.tenant_id, 63)}",
        f"*Agent:* {escape(row.agent, 64)}",
    ]
    votes = [v.get("by", "?") for v in row.votes or [] if isinstance(v, dict)]
    blocks: list[dict[str, Any]] = []
    if row.status == ApprovalStatus.PENDING:
        who = ROLE_WORDS.get(Role(row.required_role), f"{row.required_role}s")
        people = f"{row.required} different people" if row.required > 1 else "one person"
        fields.append(f"*Who may decide:* {who} ({people})")
        if votes:
            fields.append(f"*Approved so far:* {escape(', '.join(votes))} ({len(votes)} of {row.required})")
        fields.append(f"*Deadline:* {_when(row.expires_at)}")
        blocks = [_section("\n".join(lines)), {"type": "section", "fields": _fields(fields)}]
        blocks.append({"type": "actions", "elements": _approval_buttons(row)})
        text = f"Approval needed: {tool} in run {run}"
    else:
        by = _how(actor or row.decided_by, via)
        outcome = {
            ApprovalStatus.APPROVED: f":white_check_mark: Approved by {by}",
            ApprovalStatus.DENIED: f":no_entry: Denied by {by}",
            ApprovalStatus.EXPIRED: ":hourglass: Expired: nobody decided before the deadline (denied)",
            ApprovalStatus.WITHDRAWN: f":heavy_minus_sign: Withdrawn: the run was cancelled by {by}",
        }.get(ApprovalStatus(row.status), escape(row.status))
        if row.replaced_by:
            outcome = f":pencil2: Edited and approved by {by}: the edited call replaces this one"
        if row.note and row.status == ApprovalStatus.DENIED:
            outcome += f"\n>{escape(row.note, 500)}"
        if votes and row.required > 1:
            fields.append(f"*Approved by:* {escape(', '.join(votes))}")
        blocks = [
            _section("\n".join(lines)),
            {"type": "section", "fields": _fields(fields)},
            _section(outcome),
        ]
        text = f"{tool} in run {run}: {row.status}"
    return Message(text, blocks)


def _approval_buttons(row: Approval) -> list[dict[str, Any]]:
    card = card_url("approval", row.pk)
    if not row.arguments_hash:  # a row older than argument hashes: a button could not bind its call
        return [_button("Decide in the console", action_id=OPEN, url=card)]
    value = f"{row.pk}:{row.arguments_hash}"
    deny = _button("Deny…", action_id=DENY, value=value, style="danger")
    approve = (
        _button("Approve…", action_id=CONFIRM, value=value, style="primary")
        if row.high_impact
        else _button("Approve", action_id=APPROVE, value=value, style="primary")
    )
    return [approve, deny, _button("Edit in the console", action_id=OPEN, url=card)]


def unknown_message(row: UnknownOutcome, *, actor: str = "", via: str = "") -> Message:
    """The message of an unknown outcome: it is settled in the console, where the ledger can be checked."""
    tool, run = escape(row.tool, 128), escape(row.run_id, 128)
    lines = [f"*Outcome unknown:* `{tool}` in run `{run}`: did it run? A reconciler must say."]
    fields = [f"*Tenant:* {escape(row.tenant_id, 63)}", f"*Agent:* {escape(row.agent, 64)}"]
    if not row.settled:
        fields.append("*Who may decide:* reconcilers and admins")
        fields.append(f"*Since:* {_when(row.detected_at)}")
        run_url = _run_url(row.tenant_id, row.run_id)
        buttons = [_button("Settle in the console", action_id=OPEN, url=card_url("unknown", row.pk))]
        if run_url:
            buttons.append(_button("The run", action_id=OPEN, url=run_url))
        blocks = [
            _section("\n".join(lines)),
            {"type": "section", "fields": _fields(fields)},
            {"type": "actions", "elements": buttons},
        ]
        return Message(f"Outcome unknown: {tool} in run {run}", blocks)
    verdict = "executed" if row.executed else "not executed"
    settled = f":white_check_mark: Settled as {verdict} by {_how(actor or row.settled_by, via)}"
    blocks = [_section("\n".join(lines)), {"type": "section", "fields": _fields(fields)}, _section(settled)]
    return Message(f"{tool} in run {run}: settled as {verdict}", blocks)


def _fields(lines: list[str]) -> list[dict[str, str]]:
    return [{"type": "mrkdwn", "text": line[:2000]} for line in lines[:10]]
