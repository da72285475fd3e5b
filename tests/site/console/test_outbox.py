"""The transactional outbox across processes: a worker PROCESS's approval reaches a socket here.

The worker is a real ``manage.py keelgate_worker`` subprocess on the same database, so
nothing in memory is shared: the approval can only travel through the audit chain
(polled on SQLite, LISTEN/NOTIFY on PostgreSQL) and the channel layer (in-memory by
default, Redis with ``CHANNEL_LAYERS`` pointing at it).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from channels.db import database_sync_to_async
from django.db import connection

from approvals import outbox
from approvals.events import OutboxBatch, tenant_group
from approvals.models import Approval
from approvals.services import approval_decide
from runs.services import run_start

from .test_consumer import heads, open_socket, receive_until, resume

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]
REDIS_URL = os.environ.get("KEELGATE_TEST_REDIS_URL", "redis://127.0.0.1:6379/")


@pytest.fixture
def worker_process(child_env):
    """A ``keelgate_worker`` in its own process, polling every 0.1 s; stopped after the test."""
    process = subprocess.Popen(
        [sys.executable, "manage.py", "keelgate_worker", "--poll-seconds", "0.1"],
        cwd=ROOT,
        env=child_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    yield process
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _redis_reachable() -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping())
    except redis.RedisError:
        return False


@pytest.fixture
def redis_layer(settings):
    """The channel layer is channels-redis (as with REDIS_URL); required when CI=true."""
    if not _redis_reachable():
        message = f"Redis is not reachable at {REDIS_URL}"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{message}: required when CI=true")
        pytest.skip(message)
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL], "prefix": f"kgtest-{uuid.uuid4().hex[:8]}"},
        }
    }
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    assert type(layer).__name__ == "RedisChannelLayer"
    return layer


async def _worker_approval_reaches_the_socket(people, worker_process) -> float:
    """Open a socket, queue a run, wait for the worker process's approval to arrive; seconds."""
    socket, connected, _ = await open_socket(people["bob"])
    assert connected
    try:
        await resume(socket, await heads())
        run_id = f"p-{uuid.uuid4().hex[:8]}"
        await database_sync_to_async(run_start)(
            tenant_id="t1", agent="paper-trader", goal="buy 3 ACME", user=people["op"], run_id=run_id
        )
        text = await receive_until(socket, lambda t: 'class="item approval' in t, timeout=60)
        seen = time.time()
        approval = await database_sync_to_async(Approval.objects.get)(tenant_id="t1", run_id=run_id)
        assert f'id="item-a-{approval.pk}"' in text and "/runs/t1/" + run_id in text
        assert worker_process.poll() is None, "the worker process died"
        return seen - approval.requested_at.timestamp()
    finally:
        await socket.disconnect()


async def test_a_worker_process_approval_reaches_a_socket_in_this_process(people, worker_process):
    """Default layer (in memory): the approval crosses processes through the audit chain.

    How fast is bench 5's to say (a latency bound here fails on a loaded machine); this
    test says that it arrives, live, without a reload."""
    await _worker_approval_reaches_the_socket(people, worker_process)


async def test_the_same_through_the_redis_channel_layer(people, redis_layer, worker_process):
    """With channels-redis the tailer's batch goes through Redis to the consumer."""
    await _worker_approval_reaches_the_socket(people, worker_process)


async def test_postgres_reaches_the_socket_without_the_safety_poll(people, worker_process, settings):
    """On PostgreSQL the safety poll is 60 s here and no sequencer runs: an update well within
    it came through the tailer's look for its tenants' pending events, which it numbers itself,
    and the numbering's NOTIFY (the bound is half the poll, not a speed)."""
    if connection.vendor != "postgresql":
        pytest.skip("LISTEN/NOTIFY is the PostgreSQL path; SQLite polls (covered above)")
    settings.KEELGATE_OUTBOX_SAFETY_POLL_SECONDS = 60.0
    latency = await _worker_approval_reaches_the_socket(people, worker_process)
    assert latency < 30.0, latency


async def test_two_tailers_on_a_shared_redis_group_deliver_each_change_once(waiting, people, redis_layer):
    """Two server processes each tail the chain into the same group: the browser gets one patch."""
    socket, _, _ = await open_socket(people["bob"])
    second = outbox.OutboxTailer(layer=redis_layer)  # the other Daphne process's tailer
    try:
        now = await heads()
        await resume(socket, now)
        second.watch({"t1": now["t1"]})
        await database_sync_to_async(approval_decide)(
            tenant_id="t1", approval_id=waiting.pk, user=people["op"], decision="approve"
        )
        await receive_until(socket, lambda t: "data-gone" in t)
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline and second.sent_batches == 0:
            await asyncio.sleep(0.05)
        assert second.sent_batches >= 1  # the duplicate was sent...
        assert await socket.receive_nothing(timeout=1.0)  # ...and dropped by its number
    finally:
        await second.stop()
        await socket.disconnect()


async def test_the_tailer_runs_only_while_someone_watches(waiting, people):
    """Started by the first socket of the process, stopped after the last one leaves."""
    first, _, _ = await open_socket(people["op"])
    second, _, _ = await open_socket(people["bob"])
    tailer = outbox.tailer()
    assert tailer.task is not None and not tailer.task.done()
    assert tailer.watchers["t1"] == 2
    await first.disconnect()
    assert tailer.task is not None
    await second.disconnect()
    assert tailer.task is None and not tailer.watchers


async def test_a_batch_is_a_validated_wire_format(people):
    """Batches survive a JSON round trip and refuse unknown fields (extra="forbid")."""
    batch = OutboxBatch(
        tenant_id="t1", first_seq=3, last_seq=4, items=[{"seq": 3, "kind": "x", "actor": "a"}]
    )
    assert OutboxBatch.model_validate(batch.model_dump(mode="json")) == batch
    with pytest.raises(ValueError):
        OutboxBatch.model_validate({**batch.model_dump(mode="json"), "html": "<b>"})
    with pytest.raises(ValueError):
        OutboxBatch(tenant_id="../etc", first_seq=1, last_seq=1)
    assert tenant_group("t1") == "keelgate.inbox.t1"
