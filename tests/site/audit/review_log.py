"""A tenant's log for the review tests, written as rows: every field a filter reads is known.

``LOG`` is 30 sequenced events two hours apart from 2026-12-01 00:00 UTC, with three
actors, four kinds, five runs (every seventh event names none) and two tools; the tests
compute what a filter must keep from this list, in Python, not from the code under test.
``write_log`` also writes events that are not sequenced yet (``seq`` NULL), which no
page or API may show, and moves the tenant's head as the sequencer would.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from audit.models import TREE_LEAF, AuditEvent, ChainHead
from keelgate.audit import GENESIS_HASH, format_at

START = datetime(2026, 12, 1, tzinfo=UTC)
KINDS = ("run.requested", "gateway.call", "approval.decided", "loop.reconciled")
UNSEQUENCED_ACTOR = "pending-writer"


@dataclass(frozen=True)
class Spec:
    """One event of the log as the tests know it."""

    seq: int
    at: datetime
    actor: str
    kind: str
    run_id: str
    tool: str


def spec(seq: int) -> Spec:
    """The ``seq``-th event of :data:`LOG`."""
    run_id = "" if seq % 7 == 0 else f"r-{seq % 5}"
    return Spec(
        seq=seq,
        at=START + timedelta(hours=2 * (seq - 1)),
        actor=("alice", "bob", "system")[seq % 3],
        kind=KINDS[seq % 4],
        run_id=run_id,
        tool="" if not run_id else ("place_order" if seq % 2 else "transfer"),
    )


LOG = [spec(seq) for seq in range(1, 31)]


def row(tenant_id: str, s: Spec, *, seq: int | None = None) -> AuditEvent:
    """An unsaved row for ``s`` (with ``seq`` None: not sequenced yet)."""
    body: dict[str, object] = {"n": s.seq}
    if s.run_id:
        body["run_id"] = s.run_id
    if s.tool:
        body["tool"] = s.tool
    return AuditEvent(
        tenant_id=tenant_id,
        seq=seq,
        at=format_at(s.at),
        actor=s.actor,
        kind=s.kind,
        body=json.dumps(body, sort_keys=True),
        run_id=s.run_id,
        tool=s.tool,
        version=TREE_LEAF,
        leaf_hash=f"{s.seq:064x}" if seq is not None else "",
    )


def write_log(tenant_id: str, log: list[Spec] = LOG, *, unsequenced: int = 3) -> None:
    """``log`` as sequenced rows of ``tenant_id``, ``unsequenced`` more that are not, and the head."""
    rows = [row(tenant_id, s, seq=s.seq) for s in log]
    waiting = Spec(0, START, UNSEQUENCED_ACTOR, "run.requested", "r-1", "place_order")
    rows += [row(tenant_id, waiting) for _ in range(unsequenced)]
    AuditEvent.objects.bulk_create(rows, batch_size=2000)
    head = max((s.seq for s in log), default=0)
    ChainHead.objects.update_or_create(tenant_id=tenant_id, defaults={"seq": head, "hash": GENESIS_HASH})
