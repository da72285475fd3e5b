"""The forms a click opens: **Deny…** asks why; a high-impact call's **Approve…** asks for
the typed confirmation. A form's submission is the decision.

A denial needs a reason (the console's rule, and the run is told it), and approving a
high-impact call needs "approve" typed (the console's deliberate second step); a button
carries neither, so the click opens a modal (``views.open``) in its own request,
within the three seconds its ``trigger_id`` lives. The form carries what the button
carried (``<approval id>:<arguments hash>``) and the click's ``response_url`` in its
``private_metadata``, so the submission, signed by Slack like the click, is recorded
and decided as a click is (:mod:`.interactions`), and its clicker is told what came of
it the same way.

Nothing is decided when a form opens; a form closed without submitting decides nothing.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from approvals.models import Approval
from notifications.models import SlackWorkspace
from notifications.slack import transport
from notifications.slack.blocks import CONFIRM_FORM, DENY_FORM, TEXT_MAX, escape
from notifications.slack.workspaces import CredentialMissing, bot_token

log = logging.getLogger("keelgate.slack")

REASON = "reason"
"""The block and the action id of the Deny form's input."""
TYPED = "confirm"
"""The block and the action id of the confirmation form's input."""
REASON_MAX = 2000
TYPED_WORD = "approve"
"""What the confirmation form wants typed, as the console's box does."""
METADATA_MAX = 3000
"""Slack's limit on a view's ``private_metadata``."""
OPEN_TIMEOUT_SECONDS = 2
"""Below the three seconds a ``trigger_id`` lives."""


@dataclass(frozen=True)
class Form:
    """One of the two forms: what it is called, what it asks, and the decision it makes."""

    callback_id: str
    decision: str
    title: str
    submit: str
    field: str
    label: str
    words: str
    multiline: bool


DENY_WITH_REASON = Form(
    DENY_FORM,
    "deny",
    "Deny the call",
    "Deny",
    REASON,
    "Why?",
    "Nothing is executed, and the run is told your reason. A denial by any one person ends a call"
    " that needs several approvals.",
    True,
)
CONFIRM_TYPED = Form(
    CONFIRM_FORM,
    "approve",
    "High-impact call",
    "Approve",
    TYPED,
    f"Type {TYPED_WORD} to confirm this high-impact call",
    "This call is *high impact*: approving it takes a typed confirmation, as in the console.",
    False,
)
FORMS = {form.callback_id: form for form in (DENY_WITH_REASON, CONFIRM_TYPED)}


def form_view(form: Form, approval: Approval | None, *, value: str, reply_to: str) -> dict[str, Any]:
    """The modal ``form`` for ``approval`` (None: not one of this workspace's)."""
    if approval is not None:
        said = f"*{form.submit}* `{escape(approval.tool, 128)}` in run `{escape(approval.run_id, 128)}`?"
        if approval.impact:
            said += f"\n>{escape(approval.impact, 500)}"
    else:
        said = f"*{form.submit}* this call?"
    room = TEXT_MAX - len(form.words) - 1  # the call's words may be cut; the form's own never
    return {
        "type": "modal",
        "callback_id": form.callback_id,
        "title": {"type": "plain_text", "text": form.title},
        "submit": {"type": "plain_text", "text": form.submit},
        "close": {"type": "plain_text", "text": "Cancel"},
        "private_metadata": json.dumps({"value": value, "reply_to": reply_to}),
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": f"{said[:room]}\n{form.words}"}},
            {
                "type": "input",
                "block_id": form.field,
                "label": {"type": "plain_text", "text": form.label},
                "element": {
                    "type": "plain_text_input",
                    "action_id": form.field,
                    "multiline": form.multiline,
                    "min_length": 1,
                    "max_length": REASON_MAX,
                },
            },
        ],
    }


def form_open(workspace: SlackWorkspace, form: Form, *, trigger_id: str, value: str, reply_to: str) -> str:
    """Open ``form`` for the button's ``value``; "" if Slack shows it, else why not (never raises)."""
    approval_id = int(value.partition(":")[0])
    approval = Approval.objects.filter(tenant_id=workspace.tenant.slug, pk=approval_id).first()
    try:
        client = transport.web_client(bot_token(workspace), timeout=OPEN_TIMEOUT_SECONDS)
    except CredentialMissing:
        return "token_missing"
    view = form_view(form, approval, value=value, reply_to=reply_to)
    problem = transport.open_view(client, trigger_id=trigger_id, view=view)
    if problem:
        log.warning("slack: a form was not opened (%s)", problem)
    return problem


def form_carried(metadata: object) -> tuple[str, str] | None:
    """The button's value and the click's reply URL a form carries; None if it carries neither."""
    if not isinstance(metadata, str) or len(metadata) > METADATA_MAX:
        return None
    try:
        carried = json.loads(metadata)
    except (ValueError, RecursionError):
        return None
    if not isinstance(carried, dict):
        return None
    value, reply_to = carried.get("value"), carried.get("reply_to", "")
    if not isinstance(value, str) or not isinstance(reply_to, str):
        return None
    return value, reply_to


def form_typed(view: dict[str, Any], form: Form) -> str | None:
    """What was typed in ``form``'s field of a submitted ``view``; None if the view holds no text there."""
    state = view.get("state")
    values = state.get("values") if isinstance(state, dict) else None
    block = values.get(form.field) if isinstance(values, dict) else None
    field = block.get(form.field) if isinstance(block, dict) else None
    typed = field.get("value") if isinstance(field, dict) else None
    return typed if isinstance(typed, str) else None
