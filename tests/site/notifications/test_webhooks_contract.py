"""The webhook channel passes the channel contract, through a real Standard Webhooks receiver."""

from __future__ import annotations

import pytest

from audit.wiring import audit_log
from notifications.webhooks import WebhookChannel
from notifications.webhooks.services import webhook_endpoint_register
from tenants.models import Tenant
from tests.site.notifications._receiver import Receiver, always
from tests.site.notifications.contract import ChannelContract, Harness


class WebhookHarness(Harness):
    """One endpoint of t1 at a loopback receiver; each announcement is ``approval.expiring`` events."""

    def __init__(self, receiver: Receiver) -> None:
        self.channel = WebhookChannel()
        self.tenant_id = "t1"
        self.subscriber = ""
        self.receiver = receiver
        self.made = 0

    def subscribe(self) -> None:
        endpoint, self.receiver.secret = webhook_endpoint_register(
            tenant=Tenant.objects.get(slug="t1"), url=self.receiver.url, actor="test"
        )
        self.subscriber = str(endpoint.pk)

    def announce(self, count: int = 1) -> None:
        for _ in range(count):
            self.made += 1
            audit_log().append(
                "t1",
                actor="keelgate:reminders",
                kind="approval.expiring",
                body={
                    "run_id": f"r{self.made}",
                    "action_id": "1-2",
                    "tool": "place_order",
                    "expires_at": "2030",
                },
            )

    def routed(self, count: int) -> int:
        return count  # one message per event

    def refuse(self, refusing: bool) -> None:
        self.receiver.policy = always(500 if refusing else 200)

    def received(self) -> int:
        taken = self.receiver.acknowledged()
        assert all(r.verified for r in taken)
        return len(taken)

    def unwanted(self) -> None:
        audit_log().append("t1", actor="test", kind="run.status", body={"run_id": "r", "status": "waiting"})


class TestWebhookChannel(ChannelContract):
    """Webhooks on the shared engine."""

    @pytest.fixture
    def harness(self, operator, receivers):
        return WebhookHarness(receivers())
