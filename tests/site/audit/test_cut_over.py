"""The cut-over: a log written as a hash chain becomes the first leaves of the tree, untouched.

Events are written here as the store before the tree wrote them (``version`` 1, linked
with :meth:`keelgate.audit.AuditEvent.build`, the head at the chain's last hash), then
migration 0003's ``integrate_chains`` runs and new events (``version`` 2) follow. The
log verifies under both the chain and the tree, the chain's hashes are kept, and
tampering with a chained event is still caught, by the chain and by the tree.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
import rfc8785
from django.apps import apps as django_apps
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError

from audit.checkpoints import sign_checkpoint
from audit.digest import sign_head
from audit.models import AuditEvent as EventRow
from audit.models import ChainHead, Checkpoint
from audit.schemas import event_out
from audit.selectors import audit_digest, audit_verify
from audit.wiring import audit_log
from keelgate.audit import GENESIS_HASH, AuditEvent, compute_hash, encode_body, format_at
from tests.site.audit import child_env
from tests.site.audit.test_tamper_sql import events_root, reseal

MIGRATION = importlib.import_module("audit.migrations.0003_integrate_chains")
T0 = datetime(2026, 11, 1, 9, 30, tzinfo=UTC)
TENANT = "acme"
OTHER = "globex"
LEGACY = 5
"""Events of ``TENANT`` written before the tree."""
NEW = 4
"""Events of ``TENANT`` appended after the cut-over."""


def write_legacy(tenant_id: str, bodies: list[dict[str, Any]]) -> list[AuditEvent]:
    """A hash chain as the store before the tree wrote it: each event linked with
    :meth:`AuditEvent.build`, its time and body in their stored text, the head at the last
    hash; the columns migration 0002 added keep their defaults (``version`` 1, no leaf)."""
    prev, events = GENESIS_HASH, []
    for n, body in enumerate(bodies):
        event = AuditEvent.build(tenant_id, n + 1, T0 + timedelta(seconds=n), "agent", "note", body, prev)
        EventRow.objects.create(
            tenant_id=tenant_id,
            seq=event.seq,
            at=format_at(event.at),
            actor=event.actor,
            kind=event.kind,
            body=encode_body(body)[0],
            prev_hash=event.prev_hash,
            hash=event.hash,
            version=1,
            leaf_hash="",
        )
        events.append(event)
        prev = event.hash
    ChainHead.objects.create(tenant_id=tenant_id, seq=len(bodies), hash=prev)
    return events


def cut_over() -> None:
    """Migration 0003's data step, on the current models."""
    MIGRATION.integrate_chains(django_apps, None)


def relink_from(tenant_id: str, start: int, events: list[AuditEvent]) -> None:
    """Re-link the chain from ``start`` over the stored (edited) events, as a forger would:
    every later chained event rebuilt on the new previous hash, the head's hash too."""
    prev = events[start - 2].hash if start > 1 else GENESIS_HASH
    for row in EventRow.objects.filter(tenant_id=tenant_id, version=1, seq__gte=start).order_by("seq"):
        event = AuditEvent.build(
            tenant_id,
            row.seq,
            datetime.fromisoformat(row.at),
            row.actor,
            row.kind,
            json.loads(row.body),
            prev,
        )
        EventRow.objects.filter(pk=row.pk).update(prev_hash=prev, hash=event.hash)
        prev = event.hash
    ChainHead.objects.filter(tenant_id=tenant_id).update(hash=prev)


def verify_command() -> tuple[str, str | None]:
    """``verify_audit``'s stdout and its CommandError message (None when it passed)."""
    out = StringIO()
    try:
        call_command("verify_audit", stdout=out)
    except CommandError as exc:
        return out.getvalue(), str(exc)
    return out.getvalue(), None


def make_log() -> list[AuditEvent]:
    """``TENANT``: ``LEGACY`` chained events, cut over, then ``NEW`` tree leaves; ``OTHER``:
    three chained events. The chained events of ``TENANT`` are returned as written."""
    legacy = write_legacy(
        TENANT, [{"n": n, "run_id": f"run-{n}", "tool": "place_order", "q": 1.5} for n in range(LEGACY)]
    )
    write_legacy(OTHER, [{"n": n} for n in range(3)])
    cut_over()
    log = audit_log()
    for n in range(NEW):
        log.append(TENANT, actor="agent", kind="note", body={"n": LEGACY + n})
    return legacy


@pytest.fixture
def legacy(db: None) -> list[AuditEvent]:
    """The log of :func:`make_log`."""
    return make_log()


def test_the_log_verifies_across_the_cut_over(legacy: list[AuditEvent]) -> None:
    """Chain then tree verify as one log, to the root the events' own fields give; the head
    counts every event, keeps the chain's last hash and where the chain ends."""
    report = audit_verify(tenant_id=TENANT)
    total = LEGACY + NEW
    assert (report.ok, report.checked, report.head_seq) == (True, total, total)
    assert report.head_hash == events_root(TENANT)
    head = ChainHead.objects.get(tenant_id=TENANT)
    assert (head.seq, head.chain_seq, head.hash, head.root) == (
        total,
        LEGACY,
        legacy[-1].hash,
        report.head_hash,
    )
    out, error = verify_command()
    assert error is None
    assert out.splitlines() == [
        f"tenant={TENANT} events={total} head={total} ok",
        f"tenant={OTHER} events=3 head=3 ok",
    ]


def test_the_chain_is_kept_untouched(legacy: list[AuditEvent]) -> None:
    """Chained events keep their time, body and link exactly as written, and still link up;
    the events after the cut-over are tree leaves, with no link."""
    rows = list(EventRow.objects.filter(tenant_id=TENANT).order_by("seq"))
    prev = GENESIS_HASH
    for row, event in zip(rows[:LEGACY], legacy, strict=True):
        assert (row.version, row.at, row.body) == (1, format_at(event.at), encode_body(event.body)[0])
        assert (row.prev_hash, row.hash) == (event.prev_hash, event.hash)
        assert row.prev_hash == prev and compute_hash(prev, event.canonical()) == row.hash
        assert (row.run_id, row.tool) == (event.body["run_id"], "place_order")  # filled in for the filters
        prev = row.hash
    assert [(r.seq, r.version, r.prev_hash, r.hash) for r in rows[LEGACY:]] == [
        (seq, 2, "", "") for seq in range(LEGACY + 1, LEGACY + NEW + 1)
    ]


def test_chained_leaves_carry_their_link(legacy: list[AuditEvent]) -> None:
    """A chained event's leaf (as the API shows it) is ``v`` 1 with its prev_hash and hash;
    a new one's is ``v`` 2 without them; each leaf hash is SHA-256(0x00 || JCS(leaf))."""
    rows = list(EventRow.objects.filter(tenant_id=TENANT).order_by("seq"))
    for row, event in zip(rows, [*legacy, *[None] * NEW], strict=True):
        leaf = event_out(row).leaf
        expected: dict[str, Any] = {
            "v": row.version,
            "tenant_id": TENANT,
            "seq": row.seq,
            "at": row.at,
            "actor": row.actor,
            "kind": row.kind,
            "body": json.loads(row.body),
        }
        if event is not None:
            expected |= {"v": 1, "prev_hash": event.prev_hash, "hash": event.hash}
        assert leaf == expected
        assert row.leaf_hash == hashlib.sha256(b"\x00" + rfc8785.dumps(expected)).hexdigest()


def test_an_edited_chained_event_is_a_hash_mismatch(legacy: list[AuditEvent]) -> None:
    """An actor edited in a chained event breaks its link: hash_mismatch there, and the command fails."""
    EventRow.objects.filter(tenant_id=TENANT, seq=2).update(actor="intruder")
    report = audit_verify(tenant_id=TENANT)
    assert (report.ok, report.first_bad_seq, report.reason, report.checked) == (False, 2, "hash_mismatch", 1)
    out, error = verify_command()
    assert error is not None and f"tenant={TENANT} BROKEN at seq=2 reason=hash_mismatch" in error
    assert f"tenant={OTHER} events=3 head=3 ok" in out


def test_a_relinked_chain_does_not_mask_the_leaf(legacy: list[AuditEvent]) -> None:
    """An edited chained event whose chain was re-linked after it passes the chain's check,
    and is caught by its leaf: leaf_mismatch there. So is a chained event's leaf hash edited alone."""
    EventRow.objects.filter(tenant_id=TENANT, seq=2).update(actor="intruder")
    relink_from(TENANT, 2, legacy)
    report = audit_verify(tenant_id=TENANT)
    assert (report.first_bad_seq, report.reason) == (2, "leaf_mismatch")
    _, error = verify_command()
    assert error is not None and f"tenant={TENANT} BROKEN at seq=2 reason=leaf_mismatch" in error

    EventRow.objects.filter(tenant_id=OTHER, seq=3).update(leaf_hash="d" * 64)
    report = audit_verify(tenant_id=OTHER)
    assert (report.first_bad_seq, report.reason) == (3, "leaf_mismatch")


def test_digests_signed_before_and_after_the_cut_over_hold(legacy: list[AuditEvent]) -> None:
    """A digest signed before the tree (a chain hash at its seq) and one signed after (the
    root) both verify; a rewrite re-linked and resealed, which verifies alone, fails both,
    and a checkpoint signed after the cut-over."""
    before = dict(sign_head(TENANT, 3, legacy[2].hash))  # what audit_digest signed before the tree
    after = dict(audit_digest(tenant_id=TENANT))
    assert sign_checkpoint(TENANT) is not None
    assert audit_verify(tenant_id=TENANT, against=before).ok
    assert audit_verify(tenant_id=TENANT, against=after).ok
    wrong = dict(sign_head(TENANT, 3, legacy[1].hash))  # signed, but not this log's hash at 3
    assert audit_verify(tenant_id=TENANT, against=wrong).reason == "digest_mismatch"

    EventRow.objects.filter(tenant_id=TENANT, seq=2).update(actor="intruder")
    relink_from(TENANT, 2, legacy)
    reseal(TENANT)
    report = audit_verify(tenant_id=TENANT)
    assert (report.ok, report.first_bad_seq, report.reason) == (False, LEGACY + NEW, "checkpoint_mismatch")
    Checkpoint.objects.filter(tenant_id=TENANT).delete()  # the forger removes what the database kept
    assert audit_verify(tenant_id=TENANT).ok
    for digest, seq in ((before, 3), (after, LEGACY + NEW)):
        report = audit_verify(tenant_id=TENANT, against=digest)
        assert (report.ok, report.first_bad_seq, report.reason) == (False, seq, "digest_mismatch")


def test_every_body_the_chain_held_is_cut_over(db: None) -> None:
    """A chained event the store before the tree accepted, with an integer beyond 2**53 in
    its body (an order id), is cut over like any other and the log verifies."""
    write_legacy(TENANT, [{"n": 0}, {"order_id": 2**60, "n": 1}, {"n": 2}])
    cut_over()
    audit_log().append(TENANT, actor="agent", kind="note", body={"n": 3})
    report = audit_verify(tenant_id=TENANT)
    assert (report.ok, report.checked) == (True, 4)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_verify_audit_exits_zero_then_non_zero() -> None:
    """The real ``manage.py verify_audit`` exits 0 on a cut-over log and 1 once a chained event is edited."""
    make_log()

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "manage.py", "verify_audit"],
            cwd=settings.BASE_DIR,
            env=child_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )

    result = run()
    assert result.returncode == 0, result.stderr
    assert f"tenant={TENANT} events={LEGACY + NEW} head={LEGACY + NEW} ok" in result.stdout
    EventRow.objects.filter(tenant_id=TENANT, seq=4).update(body='{"n":99}')
    result = run()
    assert result.returncode == 1
    assert f"tenant={TENANT} BROKEN at seq=4 reason=hash_mismatch" in result.stderr
