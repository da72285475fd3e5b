"""A real SMTP server for the email tests, and waiting items made the way the site makes them.

The server is aiosmtpd on 127.0.0.1; Django's SMTP backend talks to it over TCP, and the
tests read what it received (envelope recipients and the parsed MIME message), never
Django's in-memory outbox.
"""

from __future__ import annotations

import asyncio
import email
import json
import socket
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from email import policy
from email.message import EmailMessage
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from django.contrib.auth import get_user_model
from django.db import transaction

from approvals.models import Approval, UnknownOutcome
from audit.wiring import audit_log
from tenants.models import Membership, Tenant

CONSOLE = "https://console.example.test"


@dataclass(frozen=True)
class Received:
    """One message as the SMTP server got it."""

    mail_from: str
    rcpt_tos: list[str]
    message: EmailMessage

    @property
    def subject(self) -> str:
        return str(self.message["Subject"])

    @property
    def text(self) -> str:
        part = self.message.get_body(preferencelist=("plain",))
        assert part is not None
        return str(part.get_content())

    @property
    def html(self) -> str:
        part = self.message.get_body(preferencelist=("html",))
        assert part is not None
        return str(part.get_content())


class Mailbox:
    """aiosmtpd handler: keeps what it accepts; refuses the addresses in ``refuse``.

    ``hold`` makes DATA wait (after the message is kept, before the reply), so a test can
    kill a sender between the server accepting a message and the sender hearing so.
    """

    def __init__(self) -> None:
        self.received: list[Received] = []
        self.refuse: set[str] = set()
        self.hold = 0.0
        self.lock = threading.Lock()

    async def handle_RCPT(self, server: Any, session: Any, envelope: Any, address: str, options: Any) -> str:
        if address in self.refuse:
            return "550 5.1.1 mailbox unavailable"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        message = email.message_from_bytes(envelope.original_content, policy=policy.default)
        assert isinstance(message, EmailMessage)
        with self.lock:
            self.received.append(Received(envelope.mail_from, list(envelope.rcpt_tos), message))
        if self.hold:
            await asyncio.sleep(self.hold)
        return "250 Message accepted"

    def to(self, address: str) -> list[Received]:
        """The messages whose envelope names ``address``."""
        with self.lock:
            return [r for r in self.received if address in r.rcpt_tos]

    def recipients(self) -> list[str]:
        """Every envelope recipient, one entry per message, sorted."""
        with self.lock:
            return sorted(a for r in self.received for a in r.rcpt_tos)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def smtp(settings):
    """A running SMTP server, and the settings that point Django's SMTP backend at it."""
    mailbox = Mailbox()
    controller = Controller(mailbox, hostname="127.0.0.1", port=free_port())
    controller.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST = "127.0.0.1"
    settings.EMAIL_PORT = controller.port
    settings.EMAIL_USE_TLS = settings.EMAIL_USE_SSL = False
    settings.EMAIL_HOST_USER = settings.EMAIL_HOST_PASSWORD = ""
    settings.EMAIL_TIMEOUT = 10
    settings.DEFAULT_FROM_EMAIL = "keelgate@example.test"
    settings.KEELGATE_EMAIL_ENABLED = True
    settings.KEELGATE_CONSOLE_URL = CONSOLE
    mailbox.controller = controller  # type: ignore[attr-defined]
    yield mailbox
    controller.stop()


def member(tenant: str, username: str, role: str, *, email: str | None = None, active: bool = True) -> Any:
    """User ``username`` (created if missing, address ``<username>@example.test`` unless given)
    with ``role`` in ``tenant`` (created if missing)."""
    User = get_user_model()
    user = User.objects.filter(username=username).first()
    if user is None:
        user = User.objects.create_user(username, password="pw-mail-123456")
    user.email = f"{username}@example.test" if email is None else email
    user.is_active = active
    user.save()
    tenant_row, _ = Tenant.objects.get_or_create(slug=tenant, defaults={"name": tenant.upper()})
    Membership.objects.update_or_create(user=user, tenant=tenant_row, defaults={"role": role})
    return user


def waiting_approvals(
    tenant_id: str, count: int, *, prefix: str = "run", tool: str = "place_order", goal: str = "buy 10 ACME"
) -> list[Approval]:
    """``count`` pending approvals, as the gateway and the projection write them.

    Each is the inbox row and its ``approval.requested`` event, committed together as a
    worker's grouped commit does.
    """
    now = datetime.now(UTC)
    rows = []
    log = audit_log()
    with transaction.atomic():
        for i in range(count):
            run_id, action_id = f"{prefix}-{i:03d}", f"a-{prefix}-{i:03d}"
            rows.append(
                Approval.objects.create(
                    tenant_id=tenant_id,
                    run_id=run_id,
                    action_id=action_id,
                    agent="paper-trader",
                    tool=tool,
                    arguments=json.dumps({"symbol": "ACME", "note": "SECRET-ARGUMENT"}),
                    goal=goal,
                    requested_at=now,
                )
            )
            log.append(
                tenant_id,
                actor="agent:paper-trader",
                kind="approval.requested",
                body={
                    "run_id": run_id,
                    "action_id": action_id,
                    "tool": tool,
                    "idempotency_key": f"{run_id}-k",
                    "required": 1,
                },
            )
    return rows


def unknown_event(tenant_id: str, run_id: str, action_id: str, tool: str = "place_order") -> None:
    """The gateway's ``gateway.call`` event of a WRITE whose outcome is unknown."""
    body = {
        "run_id": run_id,
        "action_id": action_id,
        "tool": tool,
        "idempotency_key": f"{run_id}-k",
        "status": "unknown",
        "code": "outcome_unknown",
        "replayed": False,
    }
    audit_log().append(tenant_id, actor="agent:paper-trader", kind="gateway.call", body=body)


def waiting_unknown(tenant_id: str, run_id: str, *, tool: str = "place_order") -> UnknownOutcome:
    """An unknown outcome: its event, then its inbox row (the projection writes it at the next save)."""
    action_id = f"a-{run_id}"
    unknown_event(tenant_id, run_id, action_id, tool)
    return UnknownOutcome.objects.create(
        tenant_id=tenant_id,
        run_id=run_id,
        action_id=action_id,
        agent="paper-trader",
        tool=tool,
        arguments=json.dumps({"symbol": "ACME", "note": "SECRET-ARGUMENT"}),
        idempotency_key=f"{run_id}-k",
        code="outcome_unknown",
        detected_at=datetime.now(UTC),
    )
