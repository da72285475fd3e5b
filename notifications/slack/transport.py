"""Slack's Web API through the official client, and what each failure means for a delivery.

``slack_sdk``'s :class:`~slack_sdk.WebClient` is imported here only, when a message is
sent (the ``slack`` extra): a site without it runs every other channel. Its base URL is
``KEELGATE_SLACK_API_URL`` (Slack's by default; the tests point it at a local fake).

A form (``views.open``) is opened in the request of the click that asked for it: its
``trigger_id`` lives three seconds.

Failures, in the seam's terms (:class:`~notifications.channel.Failed`):

- the token refused (``invalid_auth``, ``token_revoked``, ...): failed at once
  (``final``), with words that say so; no retry can help until an admin registers a
  valid token;
- Slack down, unreachable or rate limiting: the whole channel waits one backoff step;
- anything else Slack answers (``channel_not_found``, ``message_not_found``): this
  message only, retried with backoff.

A failure's words are Slack's error code or the exception's class, never the request,
whose headers hold the token.
"""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings

from notifications.channel import Delivered, Failed, Result

SLACK_API_URL = "https://slack.com/api/"

TOKEN_REFUSED = frozenset(
    {"invalid_auth", "token_revoked", "token_expired", "not_authed", "account_inactive", "no_permission"}
)
"""Slack's errors that mean the bot token will never work again as it is."""


def api_url() -> str:
    """``KEELGATE_SLACK_API_URL``, ending in ``/`` as the client wants it."""
    url = str(getattr(settings, "KEELGATE_SLACK_API_URL", SLACK_API_URL) or SLACK_API_URL)
    return url if url.endswith("/") else url + "/"


def timeout_seconds() -> int:
    """``KEELGATE_SLACK_TIMEOUT_SECONDS``: one call's limit."""
    return max(1, int(float(getattr(settings, "KEELGATE_SLACK_TIMEOUT_SECONDS", 10))))


def web_client(token: str, *, timeout: int | None = None) -> Any:
    """The official client for one workspace's bot token."""
    from slack_sdk import WebClient

    return WebClient(token=token, base_url=api_url(), timeout=timeout or timeout_seconds())


def post(client: Any, *, channel: str, text: str, blocks: list[dict[str, Any]]) -> Result:
    """``chat.postMessage``; delivered with the receipt ``<channel>:<ts>`` that an update needs."""
    return _call(lambda: client.chat_postMessage(channel=channel, text=text, blocks=blocks), channel)


def update(client: Any, *, channel: str, ts: str, text: str, blocks: list[dict[str, Any]]) -> Result:
    """``chat.update`` of the message ``ts`` in ``channel``; delivered with the same receipt."""
    return _call(lambda: client.chat_update(channel=channel, ts=ts, text=text, blocks=blocks), channel)


def open_view(client: Any, *, trigger_id: str, view: dict[str, Any]) -> str:
    """``views.open``: show ``view`` to whoever clicked with ``trigger_id``; "" if shown, else why not."""
    from slack_sdk.errors import SlackApiError, SlackClientError

    try:
        client.views_open(trigger_id=trigger_id, view=view)
    except SlackApiError as exc:
        data = getattr(exc.response, "data", None)
        return str(data.get("error", "")) if isinstance(data, dict) and data.get("error") else "slack_error"
    except (SlackClientError, OSError, ValueError) as exc:
        return type(exc).__name__
    return ""


def _call(call: Any, channel: str) -> Result:
    from slack_sdk.errors import SlackApiError, SlackClientError

    started = time.monotonic()
    try:
        response = call()
    except SlackApiError as exc:
        took = _ms(started)
        status = getattr(exc.response, "status_code", None)
        data = getattr(exc.response, "data", None)
        error = str(data.get("error", "")) if isinstance(data, dict) else ""
        if error in TOKEN_REFUSED:
            return Failed(
                f"Slack refused the bot token ({error}): register a valid one with keelgate_slack",
                status_code=status,
                duration_ms=took,
                response=error,
                final=True,
            )
        if status == 429 or error == "ratelimited" or (status is not None and status >= 500):
            return Failed(
                f"Slack is unavailable ({error or f'HTTP {status}'})",
                status_code=status,
                duration_ms=took,
                response=error,
                stop="channel",
            )
        return Failed(
            f"Slack refused the message ({error or f'HTTP {status}'})", status, took, error, "message"
        )
    except (SlackClientError, OSError, ValueError) as exc:
        return Failed(f"Slack unreachable ({type(exc).__name__})", duration_ms=_ms(started), stop="channel")
    ts = response.get("ts") if hasattr(response, "get") else None
    if not isinstance(ts, str) or not ts:
        return Failed(
            "Slack answered without a message ts", response.status_code, _ms(started), stop="message"
        )
    return Delivered(
        receipt=f"{response.get('channel') or channel}:{ts}", status_code=200, duration_ms=_ms(started)
    )


def _ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)
