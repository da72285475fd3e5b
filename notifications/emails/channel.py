"""Email about what waits for a person: the email channel on the shared engine.

Each pass of ``keelgate_notify`` does two things for it.

1. **Queue** (the engine's tail). Every tenant's chain is read past its cursor, all
   tenants in one transaction (one group). ``approval.requested``, ``approval.edited``,
   ``approval.escalated`` (its deadline handed it to a higher role) and a
   ``gateway.call`` whose status is ``unknown`` name new items; each still-waiting item
   goes to everyone who may decide it (:mod:`notifications.emails.items`), and all of a
   person's new items, across their tenants, become one :class:`~notifications.models.EmailBatch`.
   The cursors move in that transaction, so a pass that dies queues nothing and moves
   nothing.
2. **Send** (the engine's deliver). A person's due batches are claimed together and
   merged into ONE message; every item is read again (one decided meanwhile, or in a
   tenant where the person lost the role, is left out; nothing left: the batches are
   skipped), each approval given the person's own link to decide it
   (:mod:`notifications.emails.links`), sent over the pass's one SMTP connection, and
   recorded.

The send is **at least once**: a sender that dies after the SMTP server accepted a
message and before it recorded that, leaves its claim to lapse (``LEASE``), and the
message is sent again. The opposite order (record, then send) would be at most once
and a crash would lose the message silently; for an approval that means a run blocked
until someone happens to look, so a rare duplicate is the better failure.

A refused recipient fails that message alone; a server that is down or hangs up fails
the pass, and everyone's remaining batches wait one backoff step (1 min doubling to
1 h, given up after ``MAX_ATTEMPTS``).
"""

from __future__ import annotations

import smtplib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta

from django.conf import settings
from django.core.mail import get_connection
from django.utils import timezone

from notifications.channel import (
    ChannelDefaults,
    Delivered,
    Failed,
    Feed,
    Result,
    Routed,
    Send,
    Skipped,
    Subscription,
)
from notifications.emails.items import KINDS, per_person, refs_of, resolve, waiting_items
from notifications.emails.links import links_for
from notifications.emails.message import message, smtp_error
from notifications.models import EmailBatch
from tenants.models import Tenant

LEASE = timedelta(minutes=5)
"""A sender silent this long after claiming is presumed dead; its batches are sent again."""
MAX_ATTEMPTS = 10
KEEP_FINISHED = timedelta(days=7)


class EmailChannel(ChannelDefaults[EmailBatch]):
    """One message per person per pass about the approvals and unknown outcomes they may decide."""

    name = "email"
    model = EmailBatch
    kinds = KINDS
    per_pass = 1000
    per_recipient = 1000
    # One worker (the default): the pass shares one SMTP connection.

    def enabled(self) -> bool:
        """``KEELGATE_EMAIL_ENABLED``: off, a pass does nothing (and moves no cursor)."""
        return bool(getattr(settings, "KEELGATE_EMAIL_ENABLED", False))

    def subscriptions(self) -> list[list[Subscription]]:
        """Every tenant's chain, from its start, as one group: a person's tenants are queued together."""
        tenants = Tenant.objects.order_by("slug").values_list("slug", flat=True)
        return [[Subscription(subscriber=slug, tenant_id=slug) for slug in tenants]]

    def route(self, feeds: list[Feed], now: datetime) -> Routed[EmailBatch]:
        """One batch per person with every new item they may decide; unresolved refs held back."""
        routed: Routed[EmailBatch] = Routed()
        waiting = []
        for feed in feeds:
            found, held = resolve(feed.subscription.tenant_id, refs_of(feed.events), feed.held, now)
            waiting += found
            routed.held[feed.subscription.subscriber] = held
        routed.deliveries = [
            EmailBatch(user_id=user_id, items=items, created_at=now, next_attempt_at=now)
            for user_id, items in per_person(waiting).items()
        ]
        return routed

    def messages(self, due: list[EmailBatch]) -> list[list[EmailBatch]]:
        """All of a person's due batches make one message."""
        return [due] if due else []

    @contextmanager
    def session(self) -> Iterator[Send]:
        """One SMTP connection for the pass, opened at its first message.

        ``send_messages`` alone would open one per call.
        """
        connection, opened = get_connection(fail_silently=False), False

        def send(batches: Sequence[EmailBatch]) -> Result:
            nonlocal opened
            user = batches[0].user
            items = waiting_items(user=user, refs=[item for b in batches for item in b.items])
            if not items:
                return Skipped()
            # Committed before the message leaves: a link in a sent message always has its row.
            items = links_for(user=user, items=items, now=timezone.now())
            try:
                if not opened:
                    connection.open()
                    opened = True
                if not connection.send_messages([message(user, items, connection)]):
                    raise smtplib.SMTPException("not sent")
            except (smtplib.SMTPRecipientsRefused, smtplib.SMTPSenderRefused, smtplib.SMTPDataError) as exc:
                return Failed(smtp_error(exc), stop="message")  # this message only; the others go on
            except (smtplib.SMTPException, OSError) as exc:
                return Failed(smtp_error(exc), stop="channel")  # the server is down or hung up
            return Delivered()

        try:
            yield send
        finally:
            connection.close()

    def lease(self) -> timedelta:
        return LEASE

    def retry_after(self, attempts: int) -> timedelta | None:
        """1 min after the first failure, doubling to 1 h; given up at ``MAX_ATTEMPTS``."""
        if attempts >= MAX_ATTEMPTS:
            return None
        return timedelta(seconds=min(60 * 2 ** max(attempts - 1, 0), 3600))

    def keep_finished(self) -> timedelta | None:
        return KEEP_FINISHED
