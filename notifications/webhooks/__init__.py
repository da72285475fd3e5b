"""Webhooks per tenant, following the Standard Webhooks specification: one channel on the shared engine.

One concept per module, each using only those listed after it (import-linter checks):

- ``channel``: :class:`WebhookChannel`: which events, to which endpoints, each a signed POST
  with a fixed id and body (``deliver_due`` is one pass of it).
- ``services``: what an admin does to an endpoint (register, change, rotate its secret,
  disable, delete, test, redeliver), each audited; a secret is shown once.
- ``messages``: one message's id and body, and its POST signed with the current secret
  (and the previous one during a rotation's grace).
- ``selectors``: reads, for payloads (a call's arguments) and for the console page.
- ``events``: which audit events become which webhook events, and what they say.
- ``transport``: one POST to a vetted address within a hard deadline.
- ``targets``: which URLs and addresses may receive webhooks (the SSRF guard).
- ``signing``: ``whsec_`` secrets and the ``webhook-*`` headers.
"""

from notifications.passes import run_pass
from notifications.webhooks.channel import WebhookChannel

__all__ = ["WebhookChannel", "deliver_due"]


def deliver_due() -> int:
    """One pass of the webhook channel: record what the chain owes, send what is due; the number delivered."""
    return run_pass(WebhookChannel())
