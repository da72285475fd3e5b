"""The email channel passes the channel contract, through a real SMTP server."""

from __future__ import annotations

import pytest

from audit.wiring import audit_log
from notifications.emails import EmailChannel
from tenants.models import Role
from tests.site.notifications.contract import ChannelContract, Harness
from tests.site.notifications.mail import Mailbox, member, smtp, waiting_approvals

__all__ = ["smtp"]  # the fixture, imported to be used

pytestmark = pytest.mark.django_db(transaction=True)

ADDRESS = "alice@example.test"


class EmailHarness(Harness):
    """Alice approves in t9; each announcement is approvals waiting for her."""

    def __init__(self, mailbox: Mailbox) -> None:
        self.channel = EmailChannel()
        self.tenant_id = self.subscriber = "t9"
        self.mailbox = mailbox
        self.made = 0

    def subscribe(self) -> None:
        member("t9", "alice", Role.APPROVER)

    def announce(self, count: int = 1) -> None:
        self.made += 1
        waiting_approvals("t9", count, prefix=f"n{self.made}")

    def routed(self, count: int) -> int:
        return 1  # one batch per person, whatever the count

    def refuse(self, refusing: bool) -> None:
        self.mailbox.refuse = {ADDRESS} if refusing else set()

    def received(self) -> int:
        return len(self.mailbox.to(ADDRESS))

    def unwanted(self) -> None:
        audit_log().append("t9", actor="test", kind="run.status", body={"run_id": "r", "status": "done"})


class TestEmailChannel(ChannelContract):
    """Email on the shared engine."""

    @pytest.fixture
    def harness(self, smtp):
        return EmailHarness(smtp)
