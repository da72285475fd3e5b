"""Real ``keelgate_notify`` processes: SIGKILLed mid-delivery, nothing lost; two never send one message twice.

The receiver holds the first request open until the test has SIGKILLed the deliverer
that sent it, then answers nothing. A second deliverer, started afterwards, finds the
dead claim once its lease runs out and sends it again with the same ``webhook-id`` and
body. The receiver fails every other call throughout, and verifies every signature
with the ``standardwebhooks`` package.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from audit.models import AuditEvent
from audit.wiring import audit_log
from notifications.models import DeliveryStatus, WebhookAttempt, WebhookDelivery
from notifications.webhooks.events import webhook_event
from notifications.webhooks.messages import message_id
from notifications.webhooks.services import webhook_endpoint_register
from tenants.models import Tenant
from tests.site.notifications._receiver import always, block_first, fail_every_other
from tests.site.notifications._scenario import every_event

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
LEASE_SECONDS = 4.0


def deliverer_env(child_env: dict[str, str]) -> dict[str, str]:
    """What the child deliverers are told: loopback only, quick retries, a short lease, no email."""
    env = {k: v for k, v in child_env.items() if not k.startswith("EMAIL_")}
    env.update(
        {
            "KEELGATE_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8",
            "KEELGATE_WEBHOOK_RETRY_SCHEDULE": ",".join(["0.05"] * 8),
            "KEELGATE_WEBHOOK_TIMEOUT_SECONDS": "3",
            "KEELGATE_WEBHOOK_LEASE_SECONDS": str(LEASE_SECONDS),
            "KEELGATE_EMAIL_ENABLED": "0",
        }
    )
    return env


def spawn(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "manage.py", "keelgate_notify", "--poll", "0.05"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_for(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def chain_ids() -> set[str]:
    """The ids of every audit event in t1 that is a webhook event: what the receiver is owed."""
    ids = set()
    for seq, kind, actor, body in AuditEvent.objects.filter(tenant_id="t1").values_list(
        "seq", "kind", "actor", "body"
    ):
        if webhook_event(kind, actor, json.loads(body)) is not None:
            ids.add(message_id("t1", seq))
    return ids


def more_events(count: int) -> None:
    for n in range(count):
        audit_log().append(
            "t1",
            actor="keelgate:reminders",
            kind="approval.expiring",
            body={
                "run_id": f"bulk-{n}",
                "action_id": "1-2",
                "tool": "place_order",
                "expires_at": "2030-01-01",
            },
        )


def all_delivered() -> bool:
    return (
        WebhookDelivery.objects.exists()
        and not WebhookDelivery.objects.exclude(status=DeliveryStatus.DELIVERED).exists()
    )


def test_a_deliverer_sigkilled_mid_delivery_loses_nothing(operator, child_env, receivers, tmp_path):
    """Kill -9 while a request is in flight; a second deliverer redelivers it with the same id: none lost."""
    receiver = receivers(policy=block_first(then=fail_every_other))
    endpoint, receiver.secret = webhook_endpoint_register(
        tenant=Tenant.objects.get(slug="t1"), url=receiver.url, actor="test"
    )
    every_event(operator)
    more_events(10)
    expected = chain_ids()
    env = deliverer_env(child_env)
    procs = []
    try:
        first = spawn(env, tmp_path / "deliverer-1.log")
        procs.append(first)
        assert receiver.blocked.wait(60), (tmp_path / "deliverer-1.log").read_text()
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=10)
        assert first.returncode == -signal.SIGKILL
        (held,) = receiver.requests
        in_flight = WebhookDelivery.objects.get(webhook_id=held.webhook_id)
        assert in_flight.status == DeliveryStatus.DELIVERING
        assert WebhookAttempt.objects.get(delivery=in_flight, number=1).finished_at is None
        receiver.release.set()  # the held request ends without an answer: it was not taken in

        second = spawn(env, tmp_path / "deliverer-2.log")
        procs.append(second)
        assert wait_for(all_delivered, 90), (tmp_path / "deliverer-2.log").read_text()
    finally:
        for proc in procs:
            stop(proc)

    figures = receiver.figures(expected)
    db_attempts = WebhookAttempt.objects.filter(delivery__endpoint=endpoint).count()
    print(f"\nwebhook figures across a SIGKILL of the deliverer: {figures}, attempt rows {db_attempts}")
    assert figures["events"] == len(expected) == WebhookDelivery.objects.count() == 23
    assert figures["lost"] == 0 and figures["bad_signatures"] == 0 and figures["unexpected_ids"] == 0
    counts = Counter(r.webhook_id for r in receiver.requests)
    assert counts[held.webhook_id] >= 2, "the message in flight at the kill was not sent again"
    bodies = defaultdict(set)
    for request in receiver.requests:
        bodies[request.webhook_id].add(json.dumps(request.payload, sort_keys=True))
    assert all(len(b) == 1 for b in bodies.values()), "a redelivery changed the body"
    assert figures["duplicates_by_id"] >= 1 + figures["events"] // 2  # the kill, then half the calls failing
    assert db_attempts == figures["attempts"]
    interrupted = WebhookDelivery.objects.get(webhook_id=held.webhook_id)
    attempts = list(interrupted.attempt_log.order_by("number"))
    assert attempts[0].number == 1 and attempts[0].finished_at is None  # the one the kill cut short
    assert all(a.finished_at is not None for a in attempts[1:]) and attempts[-1].status_code == 200
    # The dead claim was taken over only when its lease ran out, not while it might be alive.
    assert (attempts[1].started_at - attempts[0].started_at).total_seconds() >= LEASE_SECONDS - 0.05


def test_two_deliverers_at_once_never_send_the_same_message_twice(operator, child_env, receivers, tmp_path):
    """Claims are exclusive: two processes, two endpoints answering 200, each message once per endpoint."""
    first, second = receivers(policy=always(200)), receivers(policy=always(200))
    for receiver in (first, second):
        _, receiver.secret = webhook_endpoint_register(
            tenant=Tenant.objects.get(slug="t1"), url=receiver.url, actor="test"
        )
    more_events(40)
    env = deliverer_env(child_env)
    procs = [spawn(env, tmp_path / f"deliverer-{n}.log") for n in (1, 2)]
    try:
        assert wait_for(lambda: WebhookDelivery.objects.count() == 80 and all_delivered(), 90), "\n".join(
            (tmp_path / f"deliverer-{n}.log").read_text() for n in (1, 2)
        )
    finally:
        for proc in procs:
            stop(proc)
    expected = chain_ids()
    assert len(expected) == 40
    for receiver in (first, second):
        figures = receiver.figures(expected)
        assert figures == {
            "events": 40,
            "attempts": 40,
            "duplicates_by_id": 0,
            "lost": 0,
            "bad_signatures": 0,
            "unexpected_ids": 0,
        }
    assert WebhookAttempt.objects.count() == 80
