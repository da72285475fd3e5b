"""What a tenant's audit chain is told of a decision: the call's arguments or only their
hash, and how the decision came (a console session, an API key or a link in an email, from
which address).

The arguments policy is a setting, ``KEELGATE_AUDIT_ARGUMENTS`` (tenant slugs, ``*`` for
all), not a field of :class:`~tenants.models.Tenant` like a webhook's
``include_arguments``, for three reasons:

- the chain cannot be edited: arguments written into it (a customer's name, an account
  number) stay for as long as the chain does, so recording them is the operator's
  decision, made and reviewed where the deployment is, not a switch in the admin;
- every gateway call and decision writes an event, and their round trips are counted
  (``tests/site/runs/test_sent_writes.py``): a setting is read with no query, where a
  tenant's row would cost one per run a worker drives;
- every process reads the same list from its start; a row cached per process would let
  processes disagree for a while about what may be written.

A webhook's ``include_arguments`` is a different choice, by the tenant: whether its own
receiver is sent the arguments, read from the checkpoint when the message is made.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.http import HttpRequest

from keelgate.loop import DecisionContext
from tenants.api_keys import VerifiedKey
from tenants.ratelimit import client_address

__all__ = ["EmailLinkContext", "arguments_audited", "decision_context", "email_link_context"]

EVERY_TENANT = "*"


def arguments_audited(tenant_id: str) -> bool:
    """True if ``tenant_id``'s audit events may carry a call's arguments (``KEELGATE_AUDIT_ARGUMENTS``).

    The engine's gateway asks it at each event (``Gateway.audit_arguments``); read from
    the settings each time, so a test's override applies at once.
    """
    chosen = getattr(settings, "KEELGATE_AUDIT_ARGUMENTS", ())
    return tenant_id in chosen or EVERY_TENANT in chosen


def decision_context(request: HttpRequest) -> DecisionContext:
    """How ``request`` decides: ``api`` with the key's id for a bearer key, else ``console``
    (a signed-in session, the console's pages or the API from the browser); with the
    client's address as the rate limits read it (Daphne's peer, or with ``--proxy-headers``
    the address the proxy reports; :func:`tenants.ratelimit.client_address`).
    """
    address = client_address(request)
    auth = getattr(request, "auth", None)
    if isinstance(auth, VerifiedKey):
        return DecisionContext(via="api", key_id=str(auth.key.pk), address=address)
    return DecisionContext(via="console", address=address)


@dataclass(frozen=True, kw_only=True)
class EmailLinkContext(DecisionContext):
    """A decision taken on the confirmation page of a link in an email: ``via`` ``email``,
    and which link (its id, never its token), so the chain tells a link's decision from
    a console's made in the same session."""

    link_id: str

    def fields(self) -> dict[str, str]:
        """The engine's fields, and ``link_id``."""
        return {**super().fields(), "link_id": self.link_id}


def email_link_context(request: HttpRequest, *, link_id: int) -> EmailLinkContext:
    """How a decision through email link ``link_id`` comes: ``via`` ``email``, the link, the address."""
    return EmailLinkContext(via="email", link_id=str(link_id), address=client_address(request))
