"""The form a **Deny…** click opens: it asks why, and its submission is the denial.

A denial needs a reason (the console's rule, and the run is told it), and a button
carries none, so the click opens a modal (``views.open``) in its own request, within
the three seconds its ``trigger_id`` lives. The form carries what the button carried
(``<approval id>:<arguments hash>``) and the click's ``response_url`` in its
``private_metadata``, so the submission, signed by Slack like the click, is recorded
and decided as a click is (:mod:`.interactions`), and its clicker is told what came
of it the same way.

Nothing is decided when the form opens; a form closed without submitting denies
nothing.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from approvals.models import Approval
from notifications.models import SlackWorkspace
from notifications.slack import transport
from notifications.slack.blocks import DENY_FORM, escape
from notifications.slack.workspaces import CredentialMissing, bot_token

log = logging.getLogger("keelgate.slack")

REASON = "reason"
"""The block and the action id of the form's one input."""
REASON_MAX = 2000
OPEN_TIMEOUT_SECONDS = 2
"""Below the three seconds a ``trigger_id`` lives."""


def deny_form(approval: Approval | None, *, value: str, reply_to: str) -> dict[str, Any]:
    """The modal asking why ``approval`` (None: not one of this workspace's) is denied."""
    if approval is not None:
        said = f"Deny `{escape(approval.tool, 128)}` in run `{escape(approval.run_id, 128)}`?"
        if approval.impact:
            said += f"\n>{escape(approval.impact, 500)}"
    else:
        said = "Deny this call?"
    said += (
        "\nNothing is executed, and the run is told your reason. A denial by any one person"
        " ends a call that needs several approvals."
    )
    return {
        "type": "modal",
        "callback_id": DENY_FORM,
        "title": {"type": "plain_text", "text": "Deny the call"},
        "submit": {"type": "plain_text", "text": "Deny"},
        "close": {"type": "plain_text", "text": "Cancel"},
        "private_metadata": json.dumps({"value": value, "reply_to": reply_to}),
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": said}},
            {
                "type": "input",
                "block_id": REASON,
                "label": {"type": "plain_text", "text": "Why?"},
                "element": {
                    "type": "plain_text_input",
                    "action_id": REASON,
                    "multiline": True,
                    "min_length": 1,
                    "max_length": REASON_MAX,
                },
            },
        ],
    }


def deny_form_open(workspace: SlackWorkspace, *, trigger_id: str, value: str, reply_to: str) -> str:
    """Open the form for the button's ``value``; "" if Slack shows it, else why not (never raises)."""
    approval_id = int(value.partition(":")[0])
    approval = Approval.objects.filter(tenant_id=workspace.tenant.slug, pk=approval_id).first()
    try:
        client = transport.web_client(bot_token(workspace), timeout=OPEN_TIMEOUT_SECONDS)
    except CredentialMissing:
        return "token_missing"
    view = deny_form(approval, value=value, reply_to=reply_to)
    problem = transport.open_view(client, trigger_id=trigger_id, view=view)
    if problem:
        log.warning("slack: the form to deny was not opened (%s)", problem)
    return problem


def form_carried(metadata: object) -> tuple[str, str] | None:
    """The button's value and the click's reply URL a form carries; None if it carries neither."""
    try:
        carried = json.loads(metadata) if isinstance(metadata, str) else None
    except ValueError:
        return None
    if not isinstance(carried, dict):
        return None
    value, reply_to = carried.get("value"), carried.get("reply_to", "")
    if not isinstance(value, str) or not isinstance(reply_to, str):
        return None
    return value, reply_to
