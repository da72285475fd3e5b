"""Is this request from Slack? Its signature, by the workspace's signing secret, and its age.

Slack signs ``v0:<timestamp>:<body>`` with HMAC-SHA256 under the app's signing secret
(``X-Slack-Signature``, ``X-Slack-Request-Timestamp``). The check is ``slack_sdk``'s
:class:`~slack_sdk.signature.SignatureVerifier`; a timestamp more than
``MAX_AGE_SECONDS`` from now is refused before it, with its own reason, so a captured
request cannot be replayed later.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from notifications.models import SlackWorkspace
from notifications.slack.workspaces import CredentialMissing, signing_secret

MAX_AGE_SECONDS = 300

SIGNATURE_INVALID = "slack_signature_invalid"
REQUEST_TOO_OLD = "slack_request_too_old"
SECRET_MISSING = "slack_secret_missing"


def refusal(workspace: SlackWorkspace, body: bytes, headers: Mapping[str, str]) -> str | None:
    """Why the request is not Slack's (a code above), or None if it is."""
    from slack_sdk.signature import SignatureVerifier

    timestamp = headers.get("X-Slack-Request-Timestamp", "")
    signature = headers.get("X-Slack-Signature", "")
    if not timestamp or not signature or not timestamp.isascii() or not timestamp.isdigit():
        return SIGNATURE_INVALID
    if abs(time.time() - int(timestamp)) > MAX_AGE_SECONDS:
        return REQUEST_TOO_OLD
    try:
        secret = signing_secret(workspace)
    except CredentialMissing:
        return SECRET_MISSING
    if not SignatureVerifier(secret).is_valid(body=body, timestamp=timestamp, signature=signature):
        return SIGNATURE_INVALID
    return None
