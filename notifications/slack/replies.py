"""Messages only the clicker sees: posted to the ``response_url`` Slack gave with the click."""

from __future__ import annotations

import logging

log = logging.getLogger("keelgate.slack")


def ephemeral(response_url: str, text: str) -> bool:
    """Post ``text`` as an ephemeral reply; True if Slack took it (never raises)."""
    from slack_sdk.errors import SlackClientError
    from slack_sdk.webhook import WebhookClient

    from notifications.slack.transport import timeout_seconds

    try:
        answer = WebhookClient(response_url, timeout=timeout_seconds()).send(
            text=text, response_type="ephemeral", replace_original=False
        )
    except (SlackClientError, OSError, ValueError) as exc:
        log.warning("slack: a reply to a click was not delivered (%s)", type(exc).__name__)
        return False
    return bool(answer.status_code == 200)
