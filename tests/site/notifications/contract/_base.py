"""What the channel contract needs of a channel's test module, and helpers its parts share."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone

from notifications.channel import Channel
from notifications.models import ChainCursor, Delivery, DeliveryStatus


class Harness:
    """One channel under test with one recipient in one tenant, and its far side.

    A channel's test module subclasses this and fills in the six methods; ``channel``,
    ``tenant_id`` and ``subscriber`` are set by its constructor.
    """

    channel: Channel[Any]
    tenant_id: str
    subscriber: str
    """The cursor's key for the recipient's tenant (an endpoint's id, or the tenant)."""

    def subscribe(self) -> None:
        """Make the recipient: it hears of what the chain announces from now on."""
        raise NotImplementedError

    def announce(self, count: int = 1) -> None:
        """Append ``count`` events the channel wants (and whatever they name) to the tenant's chain."""
        raise NotImplementedError

    def routed(self, count: int) -> int:
        """Deliveries one tail makes of ``announce(count)``: one per event, or one per person."""
        raise NotImplementedError

    def refuse(self, refusing: bool) -> None:
        """Make the far side refuse the recipient's messages (or take them again)."""
        raise NotImplementedError

    def received(self) -> int:
        """Messages the far side took for the recipient."""
        raise NotImplementedError

    def unwanted(self) -> None:
        """Append an event of the tenant that the channel does not want."""
        raise NotImplementedError

    # -- shared helpers ------------------------------------------------------------

    def deliveries(self) -> list[Delivery]:
        return list(self.channel.model._default_manager.order_by("pk"))

    def cursor(self) -> ChainCursor:
        return ChainCursor.objects.get(channel=self.channel.name, subscriber=self.subscriber)

    def later(self) -> None:
        """Time passes: every retry and every lease is due now."""
        past = timezone.now() - timedelta(seconds=1)
        manager = self.channel.model._default_manager
        manager.filter(status=DeliveryStatus.PENDING).update(next_attempt_at=past)
        manager.filter(status=DeliveryStatus.DELIVERING).update(lease_until=past)
