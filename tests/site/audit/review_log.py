"""A tenant's log for the review tests, written as rows: every field a filter reads is known.

``LOG`` is 30 sequenced events two hours apart from 2026-12-01 00:00 UTC, with three
actors, four kinds, five runs (every seventh event names none) and two tools; the tests
compute what a filter must keep from this list, in Python, not from the code under test.
``write_log`` writes them numbered, as the sequencer leaves them (leaf hashes made up: no
page recomputes one), and moves the tenant's head; with ``unsequenced`` it also writes
events committed but not numbered yet (``PendingEvent``), which a reader would sequence
unless a sequencer at work holds the head: tests that write them stand in for that
sequencer (``hold_sequencing``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from audit.models import TREE_LEAF, AuditEvent, ChainHead, PendingEvent
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


def body(s: Spec) -> dict[str, object]:
    """The body ``s``'s writer gives it: its number, and its run and tool when it has them."""
    found: dict[str, object] = {"n": s.seq}
    if s.run_id:
        found["run_id"] = s.run_id
    if s.tool:
        found["tool"] = s.tool
    return found


def row(tenant_id: str, s: Spec) -> AuditEvent:
    """An unsaved numbered row for ``s``, as the sequencer leaves it."""
    return AuditEvent(
        tenant_id=tenant_id,
        seq=s.seq,
        at=format_at(s.at),
        actor=s.actor,
        kind=s.kind,
        body=json.dumps(body(s), sort_keys=True),
        run_id=s.run_id,
        tool=s.tool,
        version=TREE_LEAF,
        leaf_hash=f"{s.seq:064x}",
    )


def write_log(tenant_id: str, log: list[Spec] = LOG, *, unsequenced: int = 0) -> None:
    """``log`` as numbered rows of ``tenant_id``, and the head; ``unsequenced`` more events
    committed but still pending (the sequencer's queue), matching every filter of run r-1."""
    AuditEvent.objects.bulk_create([row(tenant_id, s) for s in log], batch_size=2000)
    waiting = Spec(0, START, UNSEQUENCED_ACTOR, "run.requested", "r-1", "place_order")
    PendingEvent.objects.bulk_create(
        PendingEvent(
            tenant_id=tenant_id,
            at=format_at(waiting.at),
            actor=waiting.actor,
            kind=waiting.kind,
            body=json.dumps(body(waiting), sort_keys=True),
            run_id=waiting.run_id,
            tool=waiting.tool,
        )
        for _ in range(unsequenced)
    )
    head = max((s.seq for s in log), default=0)
    ChainHead.objects.update_or_create(tenant_id=tenant_id, defaults={"seq": head, "hash": GENESIS_HASH})


def hold_sequencing(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Readers find the head busy, as while a sequencer works: pending events stay pending."""
    import audit.selectors

    monkeypatch.setattr(audit.selectors, "integrate_pending", lambda *args, **kwargs: 0)


class _Clock:
    """The time each appended event is written at (``keelgate.clock.Clock``)."""

    def __init__(self) -> None:
        self.at = START

    def now(self) -> datetime:
        return self.at

    def monotonic(self) -> float:
        return 0.0


def append_log(tenant_id: str, log: list[Spec] = LOG) -> None:
    """``log`` appended through the product's audit log, each event at its time: the store
    numbers them (1, 2, ... for an empty log, as in :data:`LOG`), fills ``run_id`` and
    ``tool`` from the body, and builds the tree, so checkpoints and proofs are real."""
    from audit.wiring import audit_log

    clock = _Clock()
    writer = audit_log(clock=clock)
    for s in log:
        clock.at = s.at
        writer.append(tenant_id, actor=s.actor, kind=s.kind, body=body(s))
