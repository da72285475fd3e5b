"""Writes about runs. Views, the API, commands, the worker, monitors and Temporal call these.

This module is the one writer of ``Run.status``: every move between statuses is one
conditional UPDATE with its ``run.status`` audit event in the same transaction
(:func:`run_move`; a worker's claim, which also picks the run, :func:`run_claim`), so the
chain says who moved which run where, and why. A new run is born QUEUED
(``run.requested``); a person's resume (``run.resumed``) and cancel (``run.cancelled``,
in ``approvals.services``) move it through :func:`run_move` like every other mover.
``tests/site/runs/test_one_status_writer.py`` scans the site for any other writer. A run
that becomes runnable is announced on ``runs.signals.run_queued`` after the commit. A move
that ends a run names its outcome (``runs.outcomes``), which goes with the status into the
row and the event.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Count, F, Max, Min, Q, Sum
from django.db.models.functions import Coalesce, Length
from django.utils import timezone

from audit.wiring import audit_log
from keelgate.errors import RunExistsError
from keelgate.loop import LoopLimits, LoopState, StopReason
from runs import postgresql
from runs.agents import load_agent
from runs.models import Checkpoint, Run, RunStatus
from runs.outcomes import ENDED, RunOutcome, run_outcome
from runs.signals import run_queued
from sitekit.commits import DjangoCommitGroup
from sitekit.db import unique_or_none
from sitekit.errors import NotFoundError, NotResumableError
from sitekit.postgresql.commits import PostgresCommitGroup
from tenants.access import require_role
from tenants.models import Role

STATUS_AFTER_STOP = {
    StopReason.GOAL_REACHED: RunStatus.DONE,
    StopReason.APPROVAL_PENDING: RunStatus.WAITING,
    StopReason.OUTCOME_UNKNOWN: RunStatus.WAITING,
    StopReason.INTERRUPTED: RunStatus.QUEUED,
    StopReason.CANCELLED: RunStatus.CANCELLED,
}
"""Every other stop (budgets, errors) leaves the run STOPPED, resumable by a person."""


def status_after_stop(reason: StopReason) -> str:
    """The run's status once its loop stopped for ``reason``."""
    return STATUS_AFTER_STOP.get(reason, RunStatus.STOPPED)


def run_move(
    *,
    tenant_id: str,
    run_id: str,
    to: str,
    actor: str,
    reason: str = "",
    expect: Mapping[str, Any] | None = None,
    group: DjangoCommitGroup | None = None,
    outcome: str | None = None,
    **fields: Any,
) -> bool:
    """Move one run to status ``to`` (writing ``fields`` too) while its row matches ``expect``.

    ``expect`` is the condition that makes the move safe (the lease epoch a worker
    holds, the status a decision found, the checkpoint a stop saw); when the row no
    longer matches, nothing is written and the answer is False. The ``run.status``
    audit event commits with the move, inside the caller's transaction if there is one.

    ``outcome``: what happened (``runs.outcomes.run_outcome``), required for a status in
    which a run has ended (done, cancelled, stopped) and written to the row and the event;
    any other move clears it (a resumed run has no outcome until it ends again).

    ``group`` (a commit group whose transaction is open): the move goes through its row
    writer, on PostgreSQL with the writes waiting in it, and its audit event waits for
    its next round trip, as the engine's own writes do.
    """
    ended = to in ENDED
    if ended and outcome not in RunOutcome.values:
        raise ValueError(f"a run moved to {to} needs its outcome, not {outcome!r}")
    if not ended and outcome:
        raise ValueError(f"a run moved to {to} has not ended: it has no outcome")
    values = {"status": to, "updated_at": timezone.now(), "outcome": outcome or "", **fields}
    where = {"tenant_id": tenant_id, "run_id": run_id, **(expect or {})}
    with group.write() if group is not None else transaction.atomic(savepoint=False):
        if group is not None:
            moved = group.rows.update_where(Run, where, values)
        else:
            moved = Run.objects.filter(**where).update(**values)
        if moved:
            body = {"run_id": run_id, "status": str(to)}
            if reason:
                body["reason"] = reason
            if ended:
                body["outcome"] = str(outcome)
            audit_log(group=group).record(tenant_id, actor=actor, kind="run.status", body=body)
            if to == RunStatus.QUEUED:
                _announce_queued(tenant_id, run_id)
    return int(moved) == 1


def run_claim(
    *, owner: str, lease_seconds: float, columns: tuple[str, ...], group: DjangoCommitGroup
) -> dict[str, Any] | None:
    """Move the oldest runnable run (queued, or running under an expired lease) to RUNNING
    for ``owner``, bumping its lease epoch; its ``columns`` as moved, or None.

    Inside ``group``'s open transaction: the pick locks the run (``FOR UPDATE SKIP
    LOCKED`` on PostgreSQL, so workers claiming at once take different runs; on SQLite
    the IMMEDIATE transaction holds the write lock) until the commit, with which the
    ``run.status`` audit event goes. On PostgreSQL the pick and the move are one
    statement (:func:`runs.postgresql.claim`).
    """
    now = timezone.now()
    lease_until = now + timedelta(seconds=lease_seconds)
    if isinstance(group, PostgresCommitGroup):
        claimed = postgresql.claim(group, owner=owner, now=now, lease_until=lease_until, columns=columns)
    else:
        claimed = _claim(owner=owner, now=now, lease_until=lease_until, columns=columns)
    if claimed is None:
        return None
    body = {"run_id": claimed["run_id"], "status": str(RunStatus.RUNNING), "reason": "claimed"}
    audit_log(group=group).record(claimed["tenant_id"], actor=owner, kind="run.status", body=body)
    return claimed


def _claim(
    *, owner: str, now: datetime, lease_until: datetime, columns: tuple[str, ...]
) -> dict[str, Any] | None:
    runnable = Q(status=RunStatus.QUEUED) | Q(status=RunStatus.RUNNING, lease_expires_at__lt=now)
    picked = Run.objects.select_for_update(skip_locked=True).filter(runnable).order_by("updated_at", "id")
    pk = picked.values_list("pk", flat=True).first()
    if pk is None:
        return None
    Run.objects.filter(pk=pk).update(
        status=RunStatus.RUNNING,
        updated_at=now,
        lease_owner=owner,
        lease_expires_at=lease_until,
        lease_epoch=F("lease_epoch") + 1,
        attempts=F("attempts") + 1,
    )
    row: dict[str, Any] = Run.objects.filter(pk=pk).values(*columns).get()
    return row


def _announce_queued(tenant_id: str, run_id: str) -> None:
    transaction.on_commit(lambda: run_queued.send(sender=Run, tenant_id=tenant_id, run_id=run_id))


def run_start(
    *,
    tenant_id: str,
    agent: str,
    goal: str,
    user: Any,
    run_id: str | None = None,
    limits: dict[str, Any] | None = None,
    as_of: datetime | None = None,
) -> tuple[Run, bool]:
    """Queue a new run for a worker; return it and whether it was created.

    A repeated request with the same ``run_id``, agent and goal returns the existing
    run and starts nothing; the same id with a different request is RunExistsError.
    """
    require_role(user, tenant_id, Role.APPROVER)
    spec = load_agent(agent, tenant_id=tenant_id)
    spec.validate_goal(goal)
    checked = LoopLimits.model_validate(limits or {}).model_dump(exclude_none=True)
    run_id = run_id or uuid.uuid4().hex
    with transaction.atomic():
        existing = unique_or_none(Run.objects.filter(tenant_id=tenant_id, run_id=run_id))
        if existing is not None:
            if existing.agent == agent and existing.goal == goal:
                return existing, False
            raise RunExistsError(run_id)
        run = Run.objects.create(
            tenant_id=tenant_id,
            run_id=run_id,
            agent=agent,
            goal=goal,
            as_of=as_of or timezone.now(),
            limits=checked,
            pending_limits=checked or None,
            status=RunStatus.QUEUED,
            created_by=user.get_username(),
        )
        audit_log().append(
            tenant_id,
            actor=user.get_username(),
            kind="run.requested",
            body={"run_id": run_id, "agent": agent},
        )
        _announce_queued(tenant_id, run_id)
    return run, True


def run_resume(*, tenant_id: str, run_id: str, user: Any, limits: dict[str, Any] | None = None) -> Run:
    """Queue a stopped run again, optionally with new (larger) limits.

    The person's ``run.resumed`` (with the limits) and the move's ``run.status`` commit
    together, as a cancel's ``run.cancelled`` and its move do.
    """
    require_role(user, tenant_id, Role.APPROVER)
    checked = LoopLimits.model_validate(limits or {}).model_dump(exclude_none=True)
    with transaction.atomic():
        run = unique_or_none(Run.objects.select_for_update().filter(tenant_id=tenant_id, run_id=run_id))
        if run is None:
            raise NotFoundError()
        if run.status != RunStatus.STOPPED:
            raise NotResumableError(run.status)
        audit_log().append(
            tenant_id,
            actor=user.get_username(),
            kind="run.resumed",
            body={"run_id": run_id, "limits": checked},
        )
        run_move(
            tenant_id=tenant_id,
            run_id=run_id,
            to=RunStatus.QUEUED,
            actor=user.get_username(),
            reason="resumed",
            expect={"status": RunStatus.STOPPED},
            pending_limits=checked or None,
        )
        run.refresh_from_db()
    return run


def run_requeue(*, tenant_id: str, run_id: str, by: str, group: DjangoCommitGroup | None = None) -> bool:
    """Make a waiting run runnable again after ``by`` decided (approve, deny, reconcile);
    ``group``: the decision's commit group (:func:`run_move`)."""
    return run_move(
        tenant_id=tenant_id,
        run_id=run_id,
        to=RunStatus.QUEUED,
        actor=by,
        reason="decided",
        expect={"status": RunStatus.WAITING},
        group=group,
    )


def run_record_tick(*, state: LoopState, agent: str, stop_reason: StopReason) -> None:
    """List a monitor's tick with the other runs, in the status its stop leaves it in.

    A tick runs before it has a row (the monitor names it from what is stored), so
    this creates the row from the tick's last checkpoint, or moves an existing one.
    """
    status = status_after_stop(stop_reason)
    fields: dict[str, Any] = {
        "agent": agent,
        "goal": state.goal,
        "as_of": state.as_of,
        "trace_id": state.trace_id,
        "phase": state.phase.value,
        "stop_reason": stop_reason.value,
        "usage": state.usage.model_dump(),
        "limits": state.limits.model_dump(),
        "iteration": state.iteration,
        "seq": state.seq,
    }
    outcome = run_outcome(status=status, stop_reason=stop_reason.value, state=state) or None
    with transaction.atomic():
        _, created = Run.objects.get_or_create(
            tenant_id=state.tenant_id,
            run_id=state.run_id,
            defaults={**fields, "status": "", "created_by": "monitor"},
        )
        run_move(
            tenant_id=state.tenant_id,
            run_id=state.run_id,
            to=status,
            actor="monitor",
            reason=stop_reason.value,
            outcome=outcome,
            **({} if created else fields),
        )


FINISHED = (RunStatus.DONE, RunStatus.CANCELLED)
"""Statuses a run never leaves: its checkpoints are history only, never resumed from."""


@dataclass(frozen=True)
class PrunedRun:
    """What pruning removed (or would remove) from one finished run."""

    tenant_id: str
    run_id: str
    first_seq: int
    last_seq: int
    removed: int
    state_bytes: int


def checkpoints_prune(
    *, finished_before: datetime, keep_last: int = 1, dry_run: bool = False
) -> list[PrunedRun]:
    """Remove the checkpoints of runs finished before ``finished_before``, all but the last ``keep_last``.

    Only done and cancelled runs: a stopped or waiting run can still resume from any of
    its checkpoints. Each run is pruned in its own transaction under its row lock, with
    the status tested again under it, so a worker moving the run meanwhile either ends
    before (and the run is skipped if it can resume) or waits. Audit events are never
    touched: the chain is the record, checkpoints are the working state.
    """
    if keep_last < 1:
        raise ValueError("keep_last must be at least 1: the last checkpoint is the run's state")
    candidates = (
        Run.objects.filter(status__in=FINISHED, updated_at__lt=finished_before)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    pruned = []
    for pk in list(candidates.iterator(chunk_size=500)):
        with transaction.atomic():
            run = Run.objects.select_for_update().filter(pk=pk, status__in=FINISHED).first()
            if run is None:
                continue
            rows = Checkpoint.objects.filter(tenant_id=run.tenant_id, run_id=run.run_id)
            newest = rows.order_by("-seq").values_list("seq", flat=True)[:keep_last]
            kept = list(newest)
            if len(kept) < keep_last:
                continue
            old = rows.filter(seq__lt=kept[-1])
            stored = Length("state") + Coalesce(Length("data"), 0)
            summary = old.aggregate(n=Count("pk"), first=Min("seq"), last=Max("seq"), size=Sum(stored))
            if not summary["n"]:
                continue
            if not dry_run:
                # The kept rows deflated against a removed one become keyframes first, in
                # this transaction: the run still loads, its history still decodes.
                Checkpoint.objects.rekey(run.tenant_id, run.run_id, first_kept=kept[-1])
                old.delete()
        pruned.append(
            PrunedRun(
                tenant_id=run.tenant_id,
                run_id=run.run_id,
                first_seq=summary["first"],
                last_seq=summary["last"],
                removed=summary["n"],
                state_bytes=summary["size"] or 0,
            )
        )
    return pruned
