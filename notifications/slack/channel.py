"""Slack on the shared engine: each waiting item posted once, the post updated when it is settled.

Each enabled workspace reads its tenant's chain past a cursor of its own (made at the
chain's head when it was registered). ``approval.requested`` and an unknown
``gateway.call`` make a **post** of their item; what settles or changes an item
(``approval.decided``, ``approval.edited``, ``approval.expired``,
``approval.escalated``, ``loop.reconciled``, ``run.cancelled``) makes an **update** of
it, which the engine sends only after the item's post (``Delivery.item``). The post's
receipt is ``<channel>:<ts>``; the update reads it back (``claims.receipt_for``) and
calls ``chat.update``. An edited call that still waits (four-eyes) is posted as an item
of its own.

What a message says is read from the inbox when it is sent (:mod:`.blocks`): a post
whose item was settled meanwhile is skipped, and so is an update without a post. Who
settled an item and how (``via``) are taken from the event that made the update.

Slack being down blocks nothing but these messages: a decision commits without Slack,
and its update waits its backoff (``KEELGATE_SLACK_RETRY_SCHEDULE``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Q

from approvals.models import Approval, ApprovalStatus, UnknownOutcome
from notifications.channel import (
    ChainEvent,
    ChannelDefaults,
    Failed,
    Feed,
    Result,
    Routed,
    Send,
    Skipped,
    Subscription,
)
from notifications.claims import receipt_for
from notifications.models import SlackDelivery, SlackWorkspace
from notifications.slack import transport
from notifications.slack.blocks import Message, approval_message, unknown_message
from notifications.slack.interactions import interactions_process
from notifications.slack.workspaces import CHANNEL_NAME, CredentialMissing, bot_token, subscriber

KINDS = frozenset(
    {
        "approval.requested",
        "approval.decided",
        "approval.edited",
        "approval.expired",
        "approval.escalated",
        "gateway.call",
        "loop.reconciled",
        "run.cancelled",
    }
)


def retry_schedule() -> list[float]:
    """``KEELGATE_SLACK_RETRY_SCHEDULE``: seconds after attempt 1, 2, ...; its length + 1 attempts in all."""
    return [
        float(s) for s in getattr(settings, "KEELGATE_SLACK_RETRY_SCHEDULE", [5, 30, 120, 600, 1800, 3600])
    ]


def items_of(event: ChainEvent) -> list[tuple[str, bool]]:
    """The items an event is about, each with whether it updates a post (else it posts one)."""
    body, kind = event.body, event.kind
    run, action = body.get("run_id"), body.get("action_id")
    if not isinstance(run, str):
        return []
    if kind == "run.cancelled":
        withdrawn = body.get("withdrawn")
        return [(f"approval:{run}:{a}", True) for a in withdrawn or [] if isinstance(a, str)]
    if not isinstance(action, str):
        return []
    if kind == "approval.requested":
        return [(f"approval:{run}:{action}", False)]
    if kind == "gateway.call":
        return [(f"unknown:{run}:{action}", False)] if body.get("status") == "unknown" else []
    if kind == "loop.reconciled":
        return [(f"unknown:{run}:{action}", True)]
    if kind == "approval.edited":
        found = [(f"approval:{run}:{action}", True)]
        new = body.get("new_action_id")
        return found + ([(f"approval:{run}:{new}", False)] if isinstance(new, str) else [])
    return [(f"approval:{run}:{action}", True)]


class SlackChannel(ChannelDefaults[SlackDelivery]):
    """Block Kit messages in each tenant's Slack workspace, posted once and updated in place."""

    name = CHANNEL_NAME
    model = SlackDelivery
    kinds = KINDS

    def subscriptions(self) -> list[list[Subscription]]:
        """Each enabled workspace on its own, from the chain's head if it has no cursor yet."""
        rows = SlackWorkspace.objects.filter(enabled=True).order_by("pk").values_list("pk", "tenant__slug")
        return [[Subscription(subscriber(pk), tenant_id, from_head=True)] for pk, tenant_id in rows]

    def route(self, feeds: list[Feed], now: datetime) -> Routed[SlackDelivery]:
        """A post or an update per item an event names."""
        routed: Routed[SlackDelivery] = Routed()
        for feed in feeds:
            workspace_id = int(feed.subscription.subscriber.removeprefix("ws"))
            for event in feed.events:
                via = event.body.get("via")
                for item, is_update in items_of(event):
                    routed.deliveries.append(
                        SlackDelivery(
                            workspace_id=workspace_id,
                            tenant_id=event.tenant_id,
                            seq=event.seq,
                            event_kind=event.kind,
                            item=item[:200],
                            update=is_update,
                            actor=event.actor[:150],
                            via=via[:32] if isinstance(via, str) else "",
                            next_attempt_at=now,
                        )
                    )
        return routed

    def sendable(self) -> Q:
        """Only to enabled workspaces: one disabled since the pass began is left due."""
        return Q(workspace__enabled=True)

    def receive(self) -> None:
        """Decide the clicks the interactions endpoint recorded (:mod:`.interactions`)."""
        interactions_process(keep=self.keep_finished())

    @contextmanager
    def session(self) -> Iterator[Send]:
        """One client per workspace for the pass."""
        clients: dict[int, Any] = {}

        def send(deliveries: Sequence[SlackDelivery]) -> Result:
            (delivery,) = deliveries
            workspace = delivery.workspace
            if workspace.pk not in clients:
                try:
                    clients[workspace.pk] = transport.web_client(bot_token(workspace))
                except CredentialMissing as exc:
                    return Failed(str(exc), stop="recipient")
            return self._send(clients[workspace.pk], delivery)

        yield send

    def _send(self, client: Any, delivery: SlackDelivery) -> Result:
        row = _item_row(delivery)
        if row is None:
            # The event can commit before the checkpoint that projects the inbox row.
            return Failed("the item is not in the inbox yet", stop="message")
        message = _message(row, delivery)
        if not delivery.update:
            if not _waits(row):
                return Skipped()  # settled before it was posted: nothing to ask anyone
            channel = delivery.workspace.channel_for(row.agent)
            return transport.post(client, channel=channel, text=message.text, blocks=message.blocks)
        receipt = receipt_for(delivery)
        if not receipt:
            return Skipped()  # never posted (settled first): nothing to update
        channel, _, ts = receipt.partition(":")
        return transport.update(client, channel=channel, ts=ts, text=message.text, blocks=message.blocks)

    def lease(self) -> timedelta:
        """Longer than a call and its client's one retry may take."""
        return timedelta(seconds=2 * transport.timeout_seconds() + 10)

    def retry_after(self, attempts: int) -> timedelta | None:
        """The schedule's wait after attempt ``attempts``; None once it has run out."""
        schedule = retry_schedule()
        return timedelta(seconds=schedule[attempts - 1]) if attempts <= len(schedule) else None

    def keep_finished(self) -> timedelta | None:
        return timedelta(days=30)


def _item_row(delivery: SlackDelivery) -> Approval | UnknownOutcome | None:
    kind, _, rest = delivery.item.partition(":")
    run_id, _, action_id = rest.rpartition(":")
    model = Approval if kind == "approval" else UnknownOutcome
    found: Approval | UnknownOutcome | None = model.objects.filter(
        tenant_id=delivery.tenant_id, run_id=run_id, action_id=action_id
    ).first()
    return found


def _waits(row: Approval | UnknownOutcome) -> bool:
    if isinstance(row, Approval):
        return row.status == ApprovalStatus.PENDING
    return not row.settled


def _message(row: Approval | UnknownOutcome, delivery: SlackDelivery) -> Message:
    settled_by = delivery.actor if delivery.update else ""
    via = delivery.via if delivery.update else ""
    if isinstance(row, Approval):
        return approval_message(row, actor=settled_by, via=via)
    return unknown_message(row, actor=settled_by, via=via)
