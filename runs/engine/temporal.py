"""Handing runs to Temporal instead of ``keelgate_worker`` (``KEELGATE_RUNNER=temporal``).

A queued run becomes a ``KeelgateLoop`` workflow (one id per run, after the commit that
queued it: :func:`dispatch` listens on ``runs.signals.run_queued``);
``keelgate_temporal_worker`` executes its activity with the same ORM stores and agents
the worker uses, and moves the run's status through ``runs.services`` from the outcome.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any

from django.conf import settings

from keelgate.loop import Loop, LoopOutcome, LoopSpec, StopReason
from runs.engine.loops import build_loop
from runs.engine.stores import DjangoCheckpointStore
from runs.models import Checkpoint, Run, RunStatus
from runs.outcomes import run_outcome
from runs.services import run_move, status_after_stop
from runs.signals import run_waiting
from sitekit.db import unique_or_none


def uses_temporal() -> bool:
    """True when the site hands runs to Temporal."""
    return bool(settings.KEELGATE_RUNNER == "temporal")


def spec_for(run: Run) -> LoopSpec:
    """The run as plain data for the workflow."""
    return LoopSpec(
        tenant_id=run.tenant_id,
        agent_id=run.agent,
        goal=run.goal,
        as_of=run.as_of,
        run_id=run.run_id,
        trace_id=run.trace_id or None,
        limits=run.pending_limits or {},
    )


def dispatch(*, tenant_id: str, run_id: str, **_: Any) -> None:
    """Start the workflow of a run that was just queued (a ``run_queued`` receiver)."""
    if not uses_temporal():
        return
    run = unique_or_none(Run.objects.filter(tenant_id=tenant_id, run_id=run_id))
    if run is not None:
        _in_thread(_start(spec_for(run), _checkpoint_seq(run)))


def _checkpoint_seq(run: Run) -> int:
    latest = (
        Checkpoint.objects.filter(tenant_id=run.tenant_id, run_id=run.run_id)
        .order_by("-seq")
        .values_list("seq", flat=True)
        .first()
    )
    return latest or 0


async def _start(spec: LoopSpec, seq: int) -> None:
    """One workflow per (run, checkpoint): a repeated dispatch joins it, a new decision starts anew.

    The previous workflow may still be finishing when a person decides, so the id
    carries the checkpoint the dispatch continues from.
    """
    from temporalio.client import Client
    from temporalio.common import WorkflowIDConflictPolicy

    from keelgate.contrib.temporal import KeelgateLoopWorkflow, RetryOptions, TemporalRunner

    client = await Client.connect(settings.KEELGATE_TEMPORAL_ADDRESS)
    runner = TemporalRunner(client, task_queue=settings.KEELGATE_TEMPORAL_TASK_QUEUE)
    await client.start_workflow(
        KeelgateLoopWorkflow.run,
        {"spec": spec.to_dict(), "options": RetryOptions().__dict__},
        id=f"{runner.workflow_id(spec)}@{seq}",
        task_queue=runner.task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )


def _in_thread(coro: Coroutine[Any, Any, None]) -> None:
    """Run a coroutine to completion from sync code, whether or not a loop is running here."""
    errors: list[BaseException] = []

    def target() -> None:
        try:
            asyncio.run(coro)
        except BaseException as exc:  # re-raised in the caller's thread
            errors.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]


def loop_for(spec: LoopSpec) -> Loop:
    """The activity's loop: the agent over the ORM stores; the run is marked running."""
    run_move(
        tenant_id=spec.tenant_id,
        run_id=spec.run_id,
        to=RunStatus.RUNNING,
        actor="temporal",
        reason="activity",
    )
    return build_loop(spec.agent_id)


def record_outcome(spec: LoopSpec, outcome: LoopOutcome) -> None:
    """Move the run to the status its workflow's outcome leaves it in, with what happened."""
    status = status_after_stop(StopReason(outcome.stop_reason))
    state = DjangoCheckpointStore().load(spec.tenant_id, spec.run_id)
    moved = run_move(
        tenant_id=spec.tenant_id,
        run_id=spec.run_id,
        to=status,
        actor="temporal",
        reason=outcome.stop_reason,
        outcome=run_outcome(status=status, stop_reason=outcome.stop_reason, state=state) or None,
        pending_limits=None,
    )
    if moved and status == RunStatus.WAITING:  # as the worker's release: standing rules apply
        run_waiting.send(
            sender=record_outcome, tenant_id=spec.tenant_id, run_id=spec.run_id, reason=outcome.stop_reason
        )
