"""Email delivery when things go wrong: refusals, a server down, passes at once, a sender killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from notifications.emails import send_due, send_queued
from notifications.models import ChainCursor, DeliveryStatus, EmailBatch
from tenants.models import Role
from tests.site._threads import all_returned, at_once
from tests.site.notifications.mail import CONSOLE, free_port, member, smtp, waiting_approvals

__all__ = ["smtp"]  # the fixture, imported to be used

pytestmark = pytest.mark.django_db(transaction=True)

MANAGE = str(Path(__file__).resolve().parents[3] / "manage.py")


def later() -> None:
    """Time passes: every retry and every claim is due now."""
    past = timezone.now() - timedelta(seconds=1)
    EmailBatch.objects.filter(finished_at=None).update(next_attempt_at=past)
    EmailBatch.objects.exclude(lease_until=None).update(lease_until=past)


def notify_once(env: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    """``manage.py keelgate_notify --once`` in a new process, mailing through the test server."""
    env = env | {
        "EMAIL_HOST": "127.0.0.1",
        "EMAIL_PORT": str(port),
        "KEELGATE_EMAIL_ENABLED": "1",
        "KEELGATE_CONSOLE_URL": CONSOLE,
        "DEFAULT_FROM_EMAIL": "keelgate@example.test",
    }
    return subprocess.Popen(
        [sys.executable, MANAGE, "keelgate_notify", "--once"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def test_a_refused_recipient_is_retried_and_the_others_still_get_theirs(smtp):
    """A 550 for one address fails that message alone; it is sent on a later pass, once."""
    member("t9", "alice", Role.APPROVER)
    member("t9", "bob", Role.APPROVER)
    waiting_approvals("t9", 3)
    smtp.refuse = {"bob@example.test"}

    assert send_due() == 1
    assert smtp.recipients() == ["alice@example.test"]
    bob = EmailBatch.objects.get(user__username="bob")
    assert bob.finished_at is None and bob.attempts == 1 and bob.last_error == "recipient refused 550"
    assert "bob" not in bob.last_error and bob.next_attempt_at > timezone.now() + timedelta(seconds=30)
    assert send_due() == 0  # not due yet

    smtp.refuse = set()
    later()
    assert send_due() == 1
    assert smtp.recipients() == ["alice@example.test", "bob@example.test"]
    assert send_due() == 0


def test_a_server_that_is_down_loses_nothing(smtp, settings):
    """Connection refused: the batches stay queued (the cursor has moved past them) and go out later."""
    member("t9", "alice", Role.APPROVER)
    member("t9", "bob", Role.APPROVER)
    waiting_approvals("t9", 2)
    port, settings.EMAIL_PORT = settings.EMAIL_PORT, free_port()

    assert send_due() == 0
    assert ChainCursor.objects.get(channel="email", subscriber="t9").seq == 2
    queued = list(EmailBatch.objects.order_by("pk").values_list("finished_at", "attempts", "last_error"))
    assert queued == [(None, 1, "ConnectionRefusedError"), (None, 0, "")]  # the second was never tried

    settings.EMAIL_PORT = port
    later()
    assert send_due() == 2
    assert smtp.recipients() == ["alice@example.test", "bob@example.test"]


def test_passes_at_once_send_each_person_one_message(smtp):
    """Four passes racing over the same new items: each person gets exactly one message."""
    people = ["alice", "bob", "carol"]
    for name in people:
        member("t9", name, Role.APPROVER)
    member("t8", "alice", Role.APPROVER)
    waiting_approvals("t9", 1, prefix="warm")  # the cursors exist: the race is over moving them
    waiting_approvals("t8", 1, prefix="warm")
    assert send_due() == 3
    smtp.received.clear()
    waiting_approvals("t9", 20)
    waiting_approvals("t8", 5, prefix="other")
    sent = all_returned(at_once([send_due] * 4))

    assert sum(sent) == 3
    assert smtp.recipients() == [f"{name}@example.test" for name in people]
    (alice,) = smtp.to("alice@example.test")
    assert alice.subject == "Keelgate: 25 approvals wait for you"
    assert EmailBatch.objects.filter(status=DeliveryStatus.DELIVERED).count() == EmailBatch.objects.count()


def test_a_restarted_process_sends_nothing_twice(smtp, child_env):
    """A new keelgate_notify process reads the durable cursor: what was mailed is not mailed again."""
    member("t9", "alice", Role.APPROVER)
    waiting_approvals("t9", 2, prefix="early")
    assert send_due() == 1

    first = notify_once(child_env, smtp.controller.port)
    _, err = first.communicate(timeout=60)
    assert first.returncode == 0, err.decode()
    assert len(smtp.received) == 1

    (late,) = waiting_approvals("t9", 1, prefix="late")
    second = notify_once(child_env, smtp.controller.port)
    _, err = second.communicate(timeout=60)
    assert second.returncode == 0, err.decode()
    assert len(smtp.received) == 2
    assert f"#item-a-{late.pk}" in smtp.received[1].text and "early-" not in smtp.received[1].text


@pytest.mark.slow
def test_a_sender_killed_after_the_server_accepted_sends_again_after_its_claim(smtp, child_env):
    """At least once: SIGKILL between the server's acceptance and the record. The claim keeps a second
    sender off while it lasts; once it lapses the message goes again (two copies, no item lost)."""
    member("t9", "alice", Role.APPROVER)
    (row,) = waiting_approvals("t9", 1)
    smtp.hold = 30.0
    sender = notify_once(child_env, smtp.controller.port)
    deadline = time.monotonic() + 60
    while not smtp.received and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(smtp.received) == 1, "the sender never reached the server"
    os.kill(sender.pid, signal.SIGKILL)
    sender.communicate(timeout=10)
    smtp.hold = 0.0

    batch = EmailBatch.objects.get()
    assert batch.finished_at is None and batch.lease_token and batch.lease_until > timezone.now()
    assert send_queued() == 0  # the claim still holds: no second sender yet
    later()
    assert send_queued() == 1
    assert send_due() == 0
    assert [f"#item-a-{row.pk}" in r.text for r in smtp.to("alice@example.test")] == [True, True]
