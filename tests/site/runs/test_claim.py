"""A worker's claim (``runs.services.run_claim``): which run it takes, what it writes, what it costs."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from datetime import timedelta

from django.db import connection
from django.utils import timezone

from audit.selectors import audit_verify
from audit.wiring import audit_log
from runs.engine.worker import Worker
from runs.models import Run, RunStatus
from runs.services import run_start
from tests.site._threads import all_returned, at_once
from tests.site.runs._batch import require_postgres


def _queued(operator, *run_ids: str) -> None:
    for run_id in run_ids:
        run_start(tenant_id="t1", agent="paper-trader", goal="buy 1 ACME", user=operator, run_id=run_id)


def test_a_claim_takes_the_oldest_runnable_run_and_moves_it_under_a_new_epoch(operator):
    """Oldest by ``updated_at`` first; status, owner, lease, epoch and attempts move; one audit event."""
    _queued(operator, "c1", "c2", "c3")
    now = timezone.now()
    for age, run_id in enumerate(("c2", "c3", "c1"), start=1):
        Run.objects.filter(run_id=run_id).update(updated_at=now - timedelta(minutes=10 * (4 - age)))
    Run.objects.filter(run_id="c2").update(lease_epoch=4, attempts=2)
    worker = Worker(lease_seconds=30)

    claim = worker.claim()

    assert claim is not None and claim.run_id == "c2"
    run = Run.objects.get(run_id="c2")
    assert (run.status, run.lease_owner, run.lease_epoch, run.attempts) == (
        RunStatus.RUNNING,
        worker.owner,
        5,
        3,
    )
    assert claim.epoch == 5 and claim.pk == run.pk
    assert (claim.agent, claim.goal, claim.as_of, claim.trace_id) == (
        run.agent,
        run.goal,
        run.as_of,
        run.trace_id,
    )
    assert claim.pending_limits == run.pending_limits
    assert run.lease_expires_at is not None
    assert timedelta(seconds=29) < run.lease_expires_at - now < timedelta(seconds=31)
    last = audit_log().head("t1")
    assert last is not None and last.kind == "run.status" and last.actor == worker.owner
    assert last.body == {"run_id": "c2", "status": "running", "reason": "claimed"}
    assert audit_verify(tenant_id="t1").ok
    assert [worker.claim().run_id, worker.claim().run_id] == ["c3", "c1"]  # type: ignore[union-attr]


def test_only_queued_runs_and_expired_leases_are_claimed(operator):
    """A live lease, a waiting or a finished run stays where it is; an expired lease is taken over."""
    _queued(operator, "live", "expired", "waiting", "done")
    now = timezone.now()
    Run.objects.filter(run_id="live").update(
        status=RunStatus.RUNNING, lease_expires_at=now + timedelta(minutes=5)
    )
    Run.objects.filter(run_id="expired").update(
        status=RunStatus.RUNNING,
        lease_expires_at=now - timedelta(seconds=1),
        lease_epoch=7,
        lease_owner="dead",
    )
    Run.objects.filter(run_id="waiting").update(status=RunStatus.WAITING)
    Run.objects.filter(run_id="done").update(status=RunStatus.DONE)
    worker = Worker(lease_seconds=30)

    claim = worker.claim()

    assert claim is not None and (claim.run_id, claim.epoch) == ("expired", 8)
    assert Run.objects.get(run_id="expired").lease_owner == worker.owner
    assert worker.claim() is None
    statuses = dict(Run.objects.values_list("run_id", "status"))
    assert statuses == {
        "live": RunStatus.RUNNING,
        "expired": RunStatus.RUNNING,
        "waiting": RunStatus.WAITING,
        "done": RunStatus.DONE,
    }


def _round_trips(action: Callable[[], object]) -> int:
    """Messages the server answered while ``action`` ran (libpq's trace: one ``ReadyForQuery`` each)."""
    connection.ensure_connection()
    pg = connection.connection.pgconn
    with tempfile.TemporaryFile("w+") as trace:
        pg.trace(trace.fileno())
        try:
            action()
        finally:
            pg.untrace()
        trace.seek(0)
        return sum(1 for line in trace if "\tB\t" in line and "\tReadyForQuery" in line)


def test_a_claim_is_two_round_trips_on_postgresql(operator):
    """The pick and the move with the ``BEGIN``, then the audit event with the ``COMMIT``;
    a claim that finds nothing, the same two."""
    require_postgres("round trips are PostgreSQL's cost")
    _queued(operator, "r1")
    worker = Worker(lease_seconds=30)
    worker.claim()  # statements prepared, connection warm
    _queued(operator, "r2")
    claims: list[object] = []
    assert _round_trips(lambda: claims.append(worker.claim())) == 2
    assert _round_trips(lambda: claims.append(worker.claim())) <= 2
    assert [getattr(c, "run_id", None) for c in claims] == ["r2", None]
    assert Run.objects.get(run_id="r2").status == RunStatus.RUNNING


def test_a_release_is_two_round_trips_on_postgresql_and_refused_under_a_lost_lease(operator):
    """The move with the ``BEGIN``, its audit event with the ``COMMIT``; a worker whose
    lease moved on releases nothing and appends nothing."""
    require_postgres("round trips are PostgreSQL's cost")
    _queued(operator, "l1", "l2")
    worker = Worker(lease_seconds=30)
    first, second = worker.claim(), worker.claim()
    assert first is not None and second is not None
    released: list[bool] = []
    assert (
        _round_trips(
            lambda: released.append(worker.release(first, RunStatus.STOPPED, reason="x", outcome="failed"))
        )
        == 2
    )
    assert released == [True] and Run.objects.get(run_id=first.run_id).status == RunStatus.STOPPED
    last = audit_log().head("t1")
    assert last is not None and last.body == {
        "run_id": first.run_id,
        "status": "stopped",
        "reason": "x",
        "outcome": "failed",
    }
    Run.objects.filter(pk=second.pk).update(lease_epoch=second.epoch + 1)  # another worker took it over
    assert not worker.release(second, RunStatus.DONE, outcome="completed")
    assert Run.objects.get(pk=second.pk).status == RunStatus.RUNNING
    assert audit_log().head("t1") == last


def test_workers_claiming_at_once_take_different_runs(operator):
    """Eight threads (each its own connection) claim together: eight runs, each claimed once."""
    require_postgres("SKIP LOCKED: SQLite serialises writers on its file lock")
    run_ids = [f"t{i}" for i in range(8)]
    _queued(operator, *run_ids)
    claims = all_returned(at_once([Worker(lease_seconds=30).claim for _ in range(8)]))
    claimed = [c.run_id for c in claims if c is not None]
    assert sorted(claimed) == sorted(run_ids)
    assert set(Run.objects.values_list("lease_epoch", flat=True)) == {1}
