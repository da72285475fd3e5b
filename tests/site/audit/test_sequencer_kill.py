"""Real process deaths on PostgreSQL: sequencers SIGKILLed mid-batch lose nothing.

Writers keep inserting unnumbered events for two tenants while ``keelgate_sequencer``
processes number them; a seeded schedule SIGKILLs the running sequencer at random
moments (most land inside a batch's transaction, which the test checks on
``pg_stat_activity``) and starts another, sometimes two at once. Afterwards: every event
written is numbered exactly once, with no gap; the log verifies (leaves, subtrees, the
head's root and every signed checkpoint); and every two successive checkpoints are
consistent (their RFC 9162 proof checks).

Set ``KEELGATE_KILL_SEED`` to replay a schedule.
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.db import connection

from audit.models import AuditEvent as EventRow
from audit.models import ChainHead, Checkpoint, PendingEvent
from audit.proofs import consistency
from audit.store import pending_event
from audit.verification import verify_log
from keelgate.audit import check_consistency
from tests.site.runs._batch import require_postgres

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
TENANTS = ("acme", "globex")
FIRST_BATCH = 12_000
WRITES_BETWEEN_KILLS = 1_500
KILLS = 10
SETTLE_TIMEOUT = 120.0


def _write(count: int, start: int) -> None:
    """``count`` unnumbered events, committed, as the PostgreSQL log's appends leave them."""
    now = datetime.now(UTC)
    PendingEvent.objects.bulk_create(
        [
            PendingEvent(**pending_event(TENANTS[n % 2], now, "writer", "note", {"n": start + n}))
            for n in range(count)
        ],
        batch_size=2000,
    )


def _spawn(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "manage.py", "keelgate_sequencer", "--poll", "0.02"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _sequencing_now() -> bool:
    """Whether another session is inside a transaction on the audit tables right now."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid() AND xact_start IS NOT NULL"
            " AND state IN ('active', 'idle in transaction')"
        )
        return bool(cursor.fetchone()[0])


def _numbered_once_without_gaps(tenant: str, context: str) -> int:
    seqs = list(EventRow.objects.filter(tenant_id=tenant).order_by("seq").values_list("seq", flat=True))
    head = ChainHead.objects.filter(tenant_id=tenant).values_list("seq", flat=True).first() or 0
    assert seqs == list(range(1, head + 1)), f"{context}: {tenant} numbers are not 1..{head}"
    return head


def test_sigkilled_sequencers_never_number_an_event_twice_or_lose_one(child_env, tmp_path):
    require_postgres("sequencers are separate processes on one server")
    seed = int(os.environ.get("KEELGATE_KILL_SEED") or time.time_ns() % 2**32)
    rng = random.Random(seed)
    context = f"seed={seed}"
    env = {**child_env, "KEELGATE_AUDIT_CHECKPOINT_INTERVAL": "0.05"}
    written = FIRST_BATCH
    _write(FIRST_BATCH, 0)
    log = tmp_path / "sequencer.log"
    procs: list[subprocess.Popen[bytes]] = []
    mid_batch = 0
    try:
        for kill in range(KILLS):
            victims = [_spawn(env, log) for _ in range(1 + (kill % 3 == 0))]  # sometimes two at once
            procs += victims
            started = time.monotonic()
            while not _sequencing_now() and time.monotonic() - started < 20:
                time.sleep(0.005)
            time.sleep(rng.uniform(0, 0.4))
            mid_batch += _sequencing_now()
            for proc in victims:
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=10)
            for tenant in TENANTS:  # after each kill, what the dead left is whole
                _numbered_once_without_gaps(tenant, f"{context} kill {kill}")
            _write(WRITES_BETWEEN_KILLS, written)
            written += WRITES_BETWEEN_KILLS
        last = _spawn(env, log)
        procs.append(last)
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while PendingEvent.objects.exists() or _unsigned():
            assert time.monotonic() < deadline, f"{context}: events still pending after {SETTLE_TIMEOUT}s"
            time.sleep(0.2)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    assert mid_batch >= KILLS // 2, (
        f"{context}: only {mid_batch} of {KILLS} kills landed inside a transaction"
    )
    total = 0
    for tenant in TENANTS:
        total += _numbered_once_without_gaps(tenant, context)
        report = verify_log(tenant_id=tenant)
        assert report.ok, f"{context}: {tenant} {report}"
        sizes = list(Checkpoint.objects.filter(tenant_id=tenant).order_by("size").values_list("size", "root"))
        assert len(sizes) >= 2, f"{context}: {tenant} has {len(sizes)} checkpoints"
        for (first, first_root), (second, second_root) in itertools.pairwise(sizes):
            proof = consistency(tenant, first=first, second=second)
            check_consistency(
                first, second, bytes.fromhex(first_root), bytes.fromhex(second_root), proof.hashes
            )
    bodies = sorted(int(b[5:-1]) for b in EventRow.objects.values_list("body", flat=True))
    assert total == written and bodies == list(range(written)), f"{context}: an event was lost or doubled"


def _unsigned() -> bool:
    from audit.sequencer import unsigned_tenants

    return bool(unsigned_tenants())
