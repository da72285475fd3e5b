"""Webhooks per tenant, following the Standard Webhooks specification.

One concept per module, each using only those listed after it (import-linter checks):

- ``delivery``: claim what is due, send it, record the attempt, retry with backoff
  (``deliver_due`` is what ``keelgate_notify`` calls each pass).
- ``services``: register an endpoint (its secret shown once).
- ``outbox``: the audit chain read past each endpoint's cursor into deliveries.
- ``selectors``: reads, for payloads (a call's arguments) and for the console page.
- ``events``: which audit events become which webhook events, and what they say.
- ``transport``: one POST to a vetted address within a hard deadline.
- ``targets``: which URLs and addresses may receive webhooks (the SSRF guard).
- ``signing``: ``whsec_`` secrets and the ``webhook-*`` headers.
"""

from notifications.webhooks.delivery import deliver_due

__all__ = ["deliver_due"]
