"""The worker: claims runnable runs under a lease and drives their loops.

A claim bumps the run's lease epoch (its fencing token) and every write the worker's
stores make checks it, so a worker that was frozen past its lease cannot overwrite the
work of the one that took over. A dead worker simply stops renewing; when its lease
expires another worker claims the run and resumes it from its checkpoint, and any key
the dead one left in flight becomes an unknown outcome for a person.

The engine is async and the ORM is sync. A worker drives its runs one at a time on one
event loop of its own (an ``asyncio.Runner``, so one context and one database
connection for all of them: a fresh ``asyncio.run`` per run opened a new connection
each time, a large share of a short run's cost, docs/performance.md#worker-runner), and
nothing else shares that loop, so the
worker process sets ``DJANGO_ALLOW_ASYNC_UNSAFE``: the ORM calls made from inside the
loop are sequential, which is exactly what Django's guard protects. A connection that
saw an error is dropped before the next run, so a killed backend costs one run a retry.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import DatabaseError, close_old_connections, connection
from django.utils import timezone

from keelgate.errors import KeelgateError, LeaseLostError, StaleCheckpointError
from keelgate.loop import Loop, LoopLimits, LoopResult, StopConditions, StopReason
from runs.agents import is_graph, load_agent
from runs.engine.fencing import Fence
from runs.engine.loops import build_loop, commit_group
from runs.engine.monitors import monitors_tick_due
from runs.models import Run, RunStatus
from runs.outcomes import RunOutcome, run_outcome
from runs.services import run_claim, run_move, status_after_stop
from runs.signals import run_waiting, worker_idle
from sitekit import metrics
from sitekit.logs import log_context

log = logging.getLogger("keelgate.worker")

_CLAIMED = (
    "id",
    "tenant_id",
    "run_id",
    "agent",
    "goal",
    "lease_epoch",
    "trace_id",
    "as_of",
    "pending_limits",
)
"""The columns a claim answers with, as moved (the epoch already bumped): what driving the run needs."""


@dataclass(frozen=True)
class Claim:
    """A run this worker holds, and the epoch that fences its writes.

    ``as_of`` and ``pending_limits`` are the row as claimed: only a move to QUEUED
    writes them (start, resume), never while a worker holds the run, so driving the
    run needs no second read of its row.
    """

    pk: int
    tenant_id: str
    run_id: str
    agent: str
    goal: str
    epoch: int
    as_of: datetime
    trace_id: str = ""
    pending_limits: dict[str, Any] | None = None


class Worker:
    """Claims and runs runs until told to stop."""

    def __init__(
        self, *, lease_seconds: float = 30.0, poll_seconds: float = 0.5, owner: str | None = None
    ) -> None:
        self.lease_seconds = lease_seconds
        self.poll_seconds = poll_seconds
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.stopping = threading.Event()
        """Set by SIGTERM: finish the current step, checkpoint, release, exit."""
        self._runner: asyncio.Runner | None = None
        self._renewer = _Renewer(self)

    # -- claiming ---------------------------------------------------------------

    def claim(self) -> Claim | None:
        """Take one runnable run (queued, or running under an expired lease): two round
        trips on PostgreSQL, the claim with its ``BEGIN``, then its audit event with the commit."""
        group = commit_group()
        with group.transaction():
            row = run_claim(owner=self.owner, lease_seconds=self.lease_seconds, columns=_CLAIMED, group=group)
        if row is None:
            return None
        return Claim(
            pk=row["id"],
            tenant_id=row["tenant_id"],
            run_id=row["run_id"],
            agent=row["agent"],
            goal=row["goal"],
            epoch=row["lease_epoch"],
            as_of=row["as_of"],
            trace_id=row["trace_id"],
            pending_limits=row["pending_limits"],
        )

    def renew(self, claim: Claim) -> bool:
        """Extend the lease; False if another worker took the run over."""
        expires = timezone.now() + timedelta(seconds=self.lease_seconds)
        return Run.objects.filter(pk=claim.pk, lease_epoch=claim.epoch).update(lease_expires_at=expires) == 1

    def release(
        self,
        claim: Claim,
        status: str,
        *,
        reason: str = "",
        seq: int | None = None,
        outcome: str | None = None,
        **fields: object,
    ) -> bool:
        """Give the run back with its new status, only if the lease is still ours (and at ``seq``).

        ``outcome``: what happened, for a status in which the run ended (``run_move``).
        On a commit group of its own, as the claim: on PostgreSQL the move with its
        ``BEGIN``, then its audit event with the ``COMMIT``, two round trips for four.
        """
        expect: dict[str, object] = {"pk": claim.pk, "lease_epoch": claim.epoch}
        if seq is not None:
            expect["seq"] = seq
        group = commit_group()
        with group.transaction():
            return run_move(
                tenant_id=claim.tenant_id,
                run_id=claim.run_id,
                to=status,
                actor=self.owner,
                reason=reason,
                expect=expect,
                group=group,
                outcome=outcome,
                lease_owner="",
                lease_expires_at=None,
                **fields,
            )

    def _release_waiting(self, claim: Claim, seq: int, reason: str) -> bool:
        """WAITING only if no decision saved a newer checkpoint since our stop.

        The decision's checkpoint save updates the same Run row, so this conditional
        move and the decision are serialised by the database.
        """
        return self.release(claim, RunStatus.WAITING, reason=reason, seq=seq, pending_limits=None)

    # -- running ------------------------------------------------------------------

    def execute(self, claim: Claim) -> str:
        """Drive one claimed run until it stops; return the run's new status."""
        with log_context(tenant=claim.tenant_id, run=claim.run_id, worker=self.owner, trace=claim.trace_id):
            return self._execute(claim)

    def _execute(self, claim: Claim) -> str:
        lost, cancel = threading.Event(), threading.Event()
        self._renewer.attach(claim, lost, cancel)
        # Tenant, run and worker are bound to every line (log_context in execute).
        context: dict[str, object] = {"epoch": claim.epoch}

        def should_stop() -> bool | StopReason:
            if cancel.is_set():
                return StopReason.CANCELLED
            return self.stopping.is_set() or lost.is_set()

        try:
            result = self._drive(claim, should_stop=should_stop)
        except LeaseLostError:
            metrics.FENCED_WRITES_REFUSED.inc()
            metrics.LEASE_LOSSES.inc()
            log.warning("lease lost; another worker owns the run %s", _kv(context))
            return RunStatus.RUNNING
        except StaleCheckpointError:
            log.warning("a newer checkpoint exists; requeueing %s", _kv(context))
            self.release(claim, RunStatus.QUEUED, reason="stale_checkpoint")
            return RunStatus.QUEUED
        except DatabaseError:
            log.exception(
                "database error during a step; the run will be retried from its checkpoint %s", _kv(context)
            )
            raise
        except KeelgateError as exc:
            log.error("run cannot proceed: %s %s", exc.code, _kv(context))
            self.release(
                claim,
                RunStatus.STOPPED,
                reason=exc.code,
                stop_reason="error",
                error_code=exc.code,
                outcome=RunOutcome.FAILED,
            )
            return RunStatus.STOPPED
        finally:
            lost.set()
            self._renewer.detach(timeout=5)
        status = status_after_stop(result.stop_reason)
        cancelled_by = (
            self._cancelled_by(claim) if status not in (RunStatus.DONE, RunStatus.CANCELLED) else ""
        )
        if cancelled_by:
            # Asked to cancel while this worker held the run, which then stopped for
            # another reason (a wait, a budget): the cancel still applies, now.
            self._fenced_loop(claim).cancel(claim.tenant_id, claim.run_id, by=cancelled_by)
            result = LoopResult(
                state=result.state, stop_reason=StopReason.CANCELLED, goal_reached=False, resumable=False
            )
            status = RunStatus.CANCELLED
        traced = {"trace": result.state.trace_id}
        for action in result.state.current_actions:
            log.info(
                "action %s",
                _kv({**context, "tool": action.tool, "status": action.status.value}),
                extra={"ids": {**traced, "action": action.action_id}},
            )
        reason = result.stop_reason.value
        if status == RunStatus.WAITING:
            released = self._release_waiting(claim, result.state.seq, reason)
            if not released:
                # A person decided between our stop checkpoint and this release: run again.
                status = RunStatus.QUEUED
                released = self.release(claim, status, reason="decided", pending_limits=None)
            else:
                run_waiting.send(
                    sender=type(self), tenant_id=claim.tenant_id, run_id=claim.run_id, reason=reason
                )
        else:
            outcome = run_outcome(status=status, stop_reason=reason, state=result.state) or None
            released = self.release(claim, status, reason=reason, pending_limits=None, outcome=outcome)
        if not released:
            metrics.LEASE_LOSSES.inc()
            log.warning("lease lost before release; the run belongs to another worker %s", _kv(context))
            return RunStatus.RUNNING
        log.info(
            "run stopped %s", _kv({**context, "reason": reason, "status": status}), extra={"ids": traced}
        )
        return status

    def _drive(self, claim: Claim, *, should_stop: Callable[[], bool | StopReason]) -> LoopResult:
        run = claim
        stop = None
        if run.pending_limits:
            stop = StopConditions.from_limits(LoopLimits.model_validate(run.pending_limits))
        graph_agent = load_agent(claim.agent) if is_graph(claim.agent) else None
        loop = self._fenced_loop(claim, should_stop=should_stop)
        os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

        async def go() -> LoopResult:
            if connection.errors_occurred and not connection.is_usable():
                connection.close()
            try:
                if graph_agent is not None:
                    # Imported here: LangGraph is an extra, needed only once a graph agent is registered.
                    from runs.engine.graphs import drive_graph

                    return await drive_graph(
                        graph_agent,
                        tenant_id=run.tenant_id,
                        run_id=run.run_id,
                        goal=run.goal,
                        as_of=run.as_of,
                        fence=Fence(claim.tenant_id, claim.run_id, claim.epoch),
                        owner=f"{self.owner}#{claim.epoch}",
                        should_stop=should_stop,
                        lease_seconds=self.lease_seconds,
                    )
                return await loop.run_or_resume(
                    goal=run.goal,
                    tenant_id=run.tenant_id,
                    agent_id=run.agent,
                    as_of=run.as_of,
                    run_id=run.run_id,
                    stop=stop,
                )
            except DatabaseError:
                connection.close()
                raise

        if self._runner is None:
            self._runner = asyncio.Runner()
        return self._runner.run(go())

    def _renew_once(self, claim: Claim, lost: threading.Event, cancel: threading.Event) -> None:
        """Renew the lease and notice a person's cancel (the renewer's thread, every third of it)."""
        try:
            if not self.renew(claim):
                lost.set()
            elif self._cancelled_by(claim):
                cancel.set()
        except DatabaseError:
            close_old_connections()

    def _cancelled_by(self, claim: Claim) -> str:
        """Who asked to cancel the run while this worker held it ("" if nobody)."""
        return str(Run.objects.values_list("cancel_requested_by", flat=True).get(pk=claim.pk))

    def _fenced_loop(
        self, claim: Claim, *, should_stop: Callable[[], bool | StopReason] | None = None
    ) -> Loop:
        """The agent's loop with every write fenced by this claim's lease epoch."""
        return build_loop(
            claim.agent,
            tenant_id=claim.tenant_id,
            fence=Fence(claim.tenant_id, claim.run_id, claim.epoch),
            owner=f"{self.owner}#{claim.epoch}",
            should_stop=should_stop,
            lease_seconds=self.lease_seconds,
        )

    def run_once(self) -> bool:
        """Claim and run one run; False when there was nothing to do."""
        claim = self.claim()
        if claim is None:
            return False
        self.execute(claim)
        return True

    def close(self) -> None:
        """Close the event loop and its database connection (``serve`` does it on return)."""
        self._renewer.close()
        runner, self._runner = self._runner, None
        if runner is None:
            return

        async def close_connection() -> None:
            connection.close()

        try:
            runner.run(close_connection())
        finally:
            runner.close()

    def serve(self, *, once: bool = False) -> None:
        """Poll for work until ``stopping`` is set (or, with ``once``, until idle)."""
        try:
            self._serve(once=once)
        finally:
            self.close()

    def _serve(self, *, once: bool) -> None:
        backoff = self.poll_seconds
        while not self.stopping.is_set():
            try:
                claim = self.claim()
            except DatabaseError:
                # The database is down or locked: drop the connection and back off.
                connection.close()
                if once:
                    raise
                self.stopping.wait(backoff)
                backoff = min(backoff * 2, 10.0)
                continue
            backoff = self.poll_seconds
            if claim is not None:
                try:
                    self.execute(claim)
                except DatabaseError:
                    # The claim just worked, so the database is there (a session was
                    # killed, say): the run resumes from its checkpoint once its lease
                    # expires, never blindly, and this worker goes on with other runs.
                    # Backing off as for a failed claim left runs sitting on expired
                    # leases for seconds.
                    connection.close()
                    if once:
                        raise
                    self.stopping.wait(self.poll_seconds)
                continue
            if once:
                return
            self.stopping.wait(self.poll_seconds)
            try:
                worker_idle.send(sender=Worker)
                monitors_tick_due()
            except DatabaseError:
                connection.close()
            except KeelgateError as exc:  # a misconfigured monitor must not stop the worker
                log.error("monitor tick failed: %s %s", exc.code, exc.detail)


class _Renewer:
    """The thread that renews the lease of the run a worker drives, kept from run to run.

    A thread started and joined per run cost a short run a few per cent on a busy
    machine (the start waits until the new thread is scheduled). This one waits for the
    next claim instead, and ends after a few idle seconds (a worker that is never closed,
    as in tests, leaves no thread behind for long). It renews every third of the lease
    from the moment a claim is attached, stops at the first lost renewal, and
    :meth:`detach` returns only once no renewal of the detached claim is in flight (or
    after its timeout), as joining the per-run thread did.
    """

    IDLE_SECONDS = 5.0

    def __init__(self, worker: Worker) -> None:
        # Weak: a waiting thread must not keep a dropped worker, its event loop and
        # that loop's database connection alive until it ends.
        self._worker = weakref.ref(worker)
        self._lease_seconds = worker.lease_seconds
        self._cond = threading.Condition()
        self._busy = threading.Lock()
        """Held while one renewal is in flight."""
        self._job: tuple[Claim, threading.Event, threading.Event] | None = None
        self._thread: threading.Thread | None = None
        self._closed = False

    def attach(self, claim: Claim, lost: threading.Event, cancel: threading.Event) -> None:
        with self._cond:
            self._closed = False
            self._job = (claim, lost, cancel)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="keelgate-lease-renewer", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def detach(self, timeout: float) -> None:
        with self._cond:
            self._job = None
            self._cond.notify_all()
        if self._busy.acquire(timeout=timeout):
            self._busy.release()

    def close(self) -> None:
        with self._cond:
            self._closed, self._job = True, None
            thread = self._thread
            self._cond.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    def _next(self, interval: float, renewed: object) -> tuple[Claim, threading.Event, threading.Event] | str:
        """Under the condition: the job due for a renewal now, with ``_busy`` taken.

        Or ``"close"``: the job this thread last renewed is gone, so it closes its
        database connection, as the per-run thread did when it ended (a test database
        can then be dropped). Or ``"end"``: closed, or idle for ``IDLE_SECONDS``.
        """
        while True:
            if renewed is not None and self._job is not renewed:
                return "close"
            idle_until = time.monotonic() + self.IDLE_SECONDS
            while self._job is None and not self._closed:
                left = idle_until - time.monotonic()
                if left <= 0:
                    return "end"
                self._cond.wait(left)
            if self._closed:
                return "end"
            job = self._job
            due = time.monotonic() + interval
            while self._job is job and not self._closed and time.monotonic() < due:
                self._cond.wait(due - time.monotonic())
            if job is not None and self._job is job and not self._closed:
                # Taken under the condition: a detach after this waits for the renewal.
                self._busy.acquire()
                return job

    def _run(self) -> None:
        interval = max(0.05, self._lease_seconds / 3)
        renewed: object = None
        try:
            while True:
                with self._cond:
                    job = self._next(interval, renewed)
                    if job == "end":
                        self._thread = None
                        return
                if isinstance(job, str):  # "close"
                    connection.close()
                    renewed = None
                    continue
                try:
                    claim, lost, cancel = job
                    worker = self._worker()
                    if worker is None:  # dropped without close(): nothing left to renew for
                        return
                    worker._renew_once(claim, lost, cancel)
                    del worker
                    renewed = job
                    if lost.is_set():
                        with self._cond:
                            if self._job is job:
                                self._job = None  # lost: no more renewals of this claim
                finally:
                    self._busy.release()
        finally:
            connection.close()


def _kv(fields: dict[str, object]) -> str:
    return " ".join(f"{k}={v}" for k, v in fields.items())
