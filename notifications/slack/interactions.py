"""A click on a message's button: recorded at once, decided afterwards, as the linked person.

Three things decide: a click on **Approve**, and the submission of a form a click
opened (:mod:`.modals`): **Deny…**'s, with its reason, and a high-impact call's
**Approve…**, with "approve" typed. All are "clicks" here.

Slack wants an answer within three seconds and may send the same request again. The
endpoint (:mod:`.endpoints`) checks the signature, records the click as a
:class:`~notifications.models.SlackInteraction` (unique per workspace, user and
``action_ts``, so a retried request is the same click) and answers 200; nothing is
decided in the request.

:func:`interactions_process` (each pass of ``keelgate_notify``, through
``SlackChannel.receive``) decides each recorded click in **one transaction** with its
row: the row is locked and still pending, the decision is
:func:`approvals.services.approval_decide` (its roles, four-eyes, escalation and
``arguments_hash`` check, as the console's), and the row is marked decided or refused
before the commit. A process killed anywhere in between commits nothing: the click is
still pending, and the next pass decides it, once.

The clicker acts only as the Keelgate user linked to them in that workspace
(:mod:`.links`). An unlinked clicker, or one the service refuses (a viewer, the same
person twice on a four-eyes call, a call that changed, an item already settled), gets
a message only they see (through the click's ``response_url``), and the refusal is an
audit event, ``slack.refused``, in the same transaction.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from approvals.models import Approval, ApprovalStatus
from approvals.services import approval_decide
from audit.wiring import audit_log
from keelgate.errors import ConfirmationRequiredError, KeelgateError, error_from_code
from keelgate.loop import DecisionContext
from notifications.models import SlackInteraction, SlackInteractionStatus, SlackLink, SlackWorkspace
from notifications.slack.blocks import APPROVE, CONFIRM, DENY, OPEN, escape
from notifications.slack.modals import (
    CONFIRM_TYPED,
    DENY_WITH_REASON,
    FORMS,
    REASON_MAX,
    TYPED_WORD,
    Form,
    form_carried,
    form_typed,
)
from sitekit.console_errors import refusal_line

log = logging.getLogger("keelgate.slack")

VIA = "slack"
"""How a decision made here is named in its audit event (``via``)."""
UNLINKED = "unlinked"
"""The refusal of a clicker no Keelgate user is linked to."""
VALUE = re.compile(r"^([0-9]{1,18}):([0-9a-f]{64})$")
PER_PASS = 200


class FormIncomplete(Exception):
    """A form sent back without what it asks: Slack keeps it open with ``errors`` under its fields."""

    def __init__(self, errors: dict[str, str]) -> None:
        super().__init__(", ".join(errors.values()))
        self.errors = errors


class PayloadInvalid(Exception):
    """The request is not an interaction this endpoint takes: a 400 with this code and words."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Click:
    """One button press (or one form submitted) as Slack reported it."""

    team_id: str
    slack_user: str
    decision: str
    """``approve`` or ``deny``."""
    value: str
    action_ts: str
    """Slack's id of the click; a form's is ``view:<its id>`` (a form is submitted once)."""
    response_url: str
    form: Form | None = None
    """The form a Deny… or Approve… button asks to open (with ``trigger_id``, within three seconds)."""
    trigger_id: str = ""
    note: str = ""
    """The reason the Deny form was submitted with."""
    confirmed: bool = False
    """"approve" was typed in the high-impact call's form."""


def payload_of(body: bytes) -> dict[str, Any]:
    """The JSON ``payload`` field of an interaction's form body; PayloadInvalid otherwise."""
    try:
        form = parse_qs(body.decode("utf-8"), strict_parsing=True, max_num_fields=20)
        (text,) = form["payload"]
        payload = json.loads(text)
    except (UnicodeDecodeError, ValueError, KeyError, RecursionError):  # nesting too deep: not a payload
        raise PayloadInvalid("payload_invalid", "The body is not a form with one JSON payload.") from None
    if not isinstance(payload, dict):
        raise PayloadInvalid("payload_invalid", "The payload is not a JSON object.")
    return payload


def team_of(payload: dict[str, Any]) -> str:
    """The workspace a payload says it comes from (to be verified with its secret)."""
    team = payload.get("team")
    team_id = team.get("id") if isinstance(team, dict) else None
    if not isinstance(team_id, str) or not team_id:
        raise PayloadInvalid("payload_invalid", "The payload names no team.")
    return team_id


def click_of(payload: dict[str, Any]) -> Click | None:
    """The click a verified payload reports; None for a link button (nothing to do).

    A ``block_actions`` payload is a button: Approve, or Deny… and Approve… (a form to
    open). A ``view_submission`` is one of those forms sent back, filled in.
    """
    kind = payload.get("type")
    if kind == "view_submission":
        return _submission_of(payload)
    if kind != "block_actions":
        raise PayloadInvalid(
            "unknown_interaction", "Only button clicks (block_actions) and Keelgate's forms are taken."
        )
    user_id = _user_of(payload)
    actions = payload.get("actions")
    if not isinstance(actions, list) or len(actions) != 1 or not isinstance(actions[0], dict):
        raise PayloadInvalid("payload_invalid", "The payload carries no single action.")
    action = actions[0]
    action_id = action.get("action_id")
    if action_id == OPEN:
        return None  # a URL button: the browser opens the console, nothing is decided here
    if action_id not in (APPROVE, DENY, CONFIRM):
        raise PayloadInvalid("unknown_action", "Keelgate knows no such action.")
    value, action_ts = _value_of(action.get("value")), action.get("action_ts")
    if not isinstance(action_ts, str) or not action_ts or len(action_ts) > 32:
        raise PayloadInvalid("payload_invalid", "The action has no action_ts.")
    response_url = _reply_url(payload.get("response_url"))
    if action_id == APPROVE:
        return Click(team_of(payload), user_id, "approve", value, action_ts, response_url)
    form = DENY_WITH_REASON if action_id == DENY else CONFIRM_TYPED
    trigger_id = payload.get("trigger_id")
    if not isinstance(trigger_id, str) or not trigger_id or len(trigger_id) > 100:
        raise PayloadInvalid("payload_invalid", "The click has no trigger_id to open its form with.")
    return Click(team_of(payload), user_id, form.decision, value, action_ts, response_url, form, trigger_id)


def _submission_of(payload: dict[str, Any]) -> Click:
    """A form, submitted: the button's value it carried, and what was typed (FormIncomplete if
    nothing, or not "approve" in the confirmation)."""
    view = payload.get("view")
    form = FORMS.get(str(view.get("callback_id"))) if isinstance(view, dict) else None
    if not isinstance(view, dict) or form is None:
        raise PayloadInvalid("unknown_interaction", "Keelgate knows no such form.")
    user_id = _user_of(payload)
    view_id = view.get("id")
    if not isinstance(view_id, str) or not view_id or len(view_id) > 24:
        raise PayloadInvalid("payload_invalid", "The form has no id.")
    carried = form_carried(view.get("private_metadata"))
    if carried is None:
        raise PayloadInvalid("payload_invalid", "The form does not carry the call it decides.")
    value, reply_to = carried
    value = _value_of(value)
    typed = (form_typed(view, form) or "").strip()
    if form is DENY_WITH_REASON and not typed:
        raise FormIncomplete({form.field: "Say why the call is denied."})
    if form is CONFIRM_TYPED and typed.lower() != TYPED_WORD:
        raise FormIncomplete({form.field: f"Type {TYPED_WORD} to approve this high-impact call."})
    return Click(
        team_of(payload),
        user_id,
        form.decision,
        value,
        f"view:{view_id}",
        _reply_url(reply_to),
        note=typed[:REASON_MAX] if form is DENY_WITH_REASON else "",
        confirmed=form is CONFIRM_TYPED,
    )


def _user_of(payload: dict[str, Any]) -> str:
    user = payload.get("user")
    user_id = user.get("id") if isinstance(user, dict) else None
    if not isinstance(user_id, str) or not user_id or len(user_id) > 32:
        raise PayloadInvalid("payload_invalid", "The payload names no user.")
    return user_id


def _value_of(value: object) -> str:
    if not isinstance(value, str) or not VALUE.match(value):
        raise PayloadInvalid("payload_invalid", "The button's value is not <approval id>:<arguments hash>.")
    return value


def _reply_url(url: object) -> str:
    return url if isinstance(url, str) and len(url) <= 500 else ""


def click_record(workspace: SlackWorkspace, click: Click) -> bool:
    """Record the click to be decided; False if this very click was recorded before (Slack's retry)."""
    assert click.form is None, "a button that opens a form decides nothing: its form does"
    match = VALUE.match(click.value)
    assert match is not None  # click_of checked it
    try:
        with transaction.atomic():
            _, created = SlackInteraction.objects.get_or_create(
                workspace=workspace,
                slack_user=click.slack_user,
                action_ts=click.action_ts,
                defaults={
                    "action": click.decision,
                    "note": click.note,
                    "confirmed": click.confirmed,
                    "approval_id": int(match.group(1)),
                    "arguments_hash": match.group(2),
                    "response_url": click.response_url,
                },
            )
    except IntegrityError:  # the same click, recorded by a request racing this one
        return False
    return created


@dataclass
class Processed:
    """What one call of :func:`interactions_process` did."""

    decided: int = 0
    refused: int = 0
    replied: int = 0


def interactions_process(limit: int = PER_PASS, *, keep: timedelta | None = None) -> Processed:
    """Decide the recorded clicks still pending, then tell each clicker what happened.

    ``keep``: how long a click told of stays (its decision is in the audit log for good);
    older ones go. Slack repeats a request within minutes, so the row that makes the
    repeat the same click is long past use.
    """
    done = Processed()
    pending = list(
        SlackInteraction.objects.filter(status=SlackInteractionStatus.PENDING)
        .order_by("pk")
        .values_list("pk", flat=True)[:limit]
    )
    for pk in pending:
        status = _decide(pk)
        if status == SlackInteractionStatus.DECIDED:
            done.decided += 1
        elif status == SlackInteractionStatus.REFUSED:
            done.refused += 1
    if keep is not None:
        SlackInteraction.objects.filter(replied=True, processed_at__lt=timezone.now() - keep).delete()
    unreplied = SlackInteraction.objects.filter(replied=False).exclude(status=SlackInteractionStatus.PENDING)
    for row in unreplied.select_related("workspace__tenant").order_by("pk")[:limit]:
        done.replied += _reply(row)
    return done


def _locked(pk: int) -> SlackInteraction | None:
    rows = SlackInteraction.objects.select_related("workspace__tenant").filter(
        pk=pk, status=SlackInteractionStatus.PENDING
    )
    if connection.vendor == "postgresql":  # another pass deciding it: leave it to that one
        rows = rows.select_for_update(skip_locked=True, of=("self",))
    return rows.first()


def _decide(pk: int) -> str | None:
    """Decide one click in one transaction with its row; its new status, or None if another pass had it."""
    with transaction.atomic():
        row = _locked(pk)
        if row is None:
            return None
        tenant_id = row.workspace.tenant.slug
        link = (
            SlackLink.objects.select_related("user")
            .filter(workspace=row.workspace, slack_user=row.slack_user, user__is_active=True)
            .first()
        )
        if link is None:
            row.reason = UNLINKED
        else:
            row.decided_as = link.user.get_username()
            try:
                approval_decide(
                    tenant_id=tenant_id,
                    approval_id=row.approval_id,
                    user=link.user,
                    decision="deny" if row.action == "deny" else "approve",
                    note=row.note,
                    seen=row.arguments_hash,
                    confirmed=row.confirmed,
                    context=DecisionContext(via=VIA),
                )
            except KeelgateError as exc:
                row.reason, row.detail = exc.code, (exc.detail or "")[:200]
        row.status = SlackInteractionStatus.REFUSED if row.reason else SlackInteractionStatus.DECIDED
        row.processed_at = timezone.now()
        if row.reason:
            _audit_refusal(tenant_id, row)
        row.save(update_fields=["status", "reason", "detail", "decided_as", "processed_at"])
        return str(row.status)


def _audit_refusal(tenant_id: str, row: SlackInteraction) -> None:
    found = (
        Approval.objects.filter(tenant_id=tenant_id, pk=row.approval_id)
        .values("run_id", "action_id", "tool")
        .first()
    )
    call: dict[str, Any] = dict(found) if found is not None else {}
    audit_log().append(
        tenant_id,
        actor=row.decided_as or f"slack:{row.slack_user}",
        kind="slack.refused",
        body={
            **call,
            "team_id": row.workspace.team_id,
            "slack_user": row.slack_user,
            "approval_id": row.approval_id,
            "arguments_hash": row.arguments_hash,
            "action": row.action,
            "reason": row.reason,
        },
    )


def reply_text(row: SlackInteraction) -> str:
    """What the clicker is told, in mrkdwn (a message only they see)."""
    if row.status == SlackInteractionStatus.REFUSED:
        if row.reason == UNLINKED:
            return (
                "Nothing was decided: your Slack account is not linked to a Keelgate user of this"
                " workspace. Open *Slack* in the Keelgate console for a code, then send"
                " `/keelgate link CODE`."
            )
        if row.reason == ConfirmationRequiredError.code:
            return (
                "Nothing was decided: this call is high impact. Approve it with its *Approve…* button"
                " or in the Keelgate console: both ask for the typed confirmation."
            )
        line = refusal_line(error_from_code(row.reason, row.detail))
        return f"Nothing was decided: {escape(line.removeprefix('not decided: '), 400)}."
    approval = (
        Approval.objects.filter(tenant_id=row.workspace.tenant.slug, pk=row.approval_id)
        .values("status", "required", "votes", "tool")
        .first()
    )
    if approval is not None and approval["status"] == ApprovalStatus.PENDING:
        left = approval["required"] - len(approval["votes"] or [])
        return f"Your approval is recorded: {left} more approver{'s' if left != 1 else ''} needed."
    tool = escape(approval["tool"], 128) if approval else "the call"
    if row.action == "deny":
        return f"Denied `{tool}` as {escape(row.decided_as, 150)}: nothing runs, and the run is told why."
    return f"Approved `{tool}` as {escape(row.decided_as, 150)}: the run is queued."


def _reply(row: SlackInteraction) -> int:
    """Tell the clicker, once, through the click's ``response_url``; 1 if Slack took it."""
    from notifications.slack.replies import ephemeral

    SlackInteraction.objects.filter(pk=row.pk).update(
        replied=True
    )  # at most once: a lost reply is not retried
    if not row.response_url or not allowed_reply_url(row.response_url):
        return 0
    return int(ephemeral(row.response_url, reply_text(row)))


def allowed_reply_url(url: str) -> bool:
    """A response URL of Slack's (``KEELGATE_SLACK_RESPONSE_URL_PREFIX``): a click cannot aim us elsewhere."""
    prefix = str(getattr(settings, "KEELGATE_SLACK_RESPONSE_URL_PREFIX", "https://hooks.slack.com/"))
    return url.startswith(prefix)
