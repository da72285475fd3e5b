"""Handing runs to Temporal instead of ``keelgate_worker`` (``KEELGATE_RUNNER=temporal``).

A queued run becomes a ``KeelgateLoop`` workflow (one id per run, after the commit that
queued it); ``keelgate_temporal_worker`` executes its activity with the same ORM stores
and agents the worker uses, and writes the run's status back from the outcome.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from keelgate.loop import Loop, LoopOutcome, LoopSpec, StopReason
from runs.engine import build_loop
from runs.models import Run, RunStatus
from runs.worker import STATUS_AFTER_STOP


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


def dispatch_on_commit(run: Run) -> None:
    """Start the run's workflow once the transaction that queued it commits."""
    if uses_temporal():
        spec = spec_for(run)
        transaction.on_commit(lambda: _in_thread(_start(spec, _checkpoint_seq(run))))


def _checkpoint_seq(run: Run) -> int:
    from runs.models import Checkpoint

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
    Run.objects.filter(tenant_id=spec.tenant_id, run_id=spec.run_id).update(
        status=RunStatus.RUNNING, updated_at=timezone.now()
    )
    return build_loop(spec.agent_id)


def record_outcome(spec: LoopSpec, outcome: LoopOutcome) -> None:
    """Write the run's status back from the workflow's outcome."""
    status = STATUS_AFTER_STOP.get(StopReason(outcome.stop_reason), RunStatus.STOPPED)
    Run.objects.filter(tenant_id=spec.tenant_id, run_id=spec.run_id).update(
        status=status, pending_limits=None, updated_at=timezone.now()
    )
