"""A LoopRunner that runs the loop as a Temporal activity inside a deterministic workflow.

If a worker dies mid-run, Temporal retries the activity (after the heartbeat timeout)
on any worker; the activity calls ``Loop.run_or_resume``, loads the checkpoint and
continues, and a WRITE that already ran is replayed from the idempotency store, never
repeated. A budget stop is a normal result (``resumable=True``), so it is not retried.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from keelgate.contrib.temporal._workflow import ACTIVITY, NON_RETRYABLE, KeelgateLoopWorkflow
from keelgate.errors import KeelgateError
from keelgate.loop import InProcessRunner, Loop, LoopOutcome, LoopSpec

__all__ = ["LoopActivity", "RetryOptions", "TemporalRunner", "temporal_worker"]


@dataclass(frozen=True)
class RetryOptions:
    """How long an attempt may take, how fast a dead one is noticed, how often to retry."""

    start_to_close_seconds: float = 3600.0
    heartbeat_seconds: float = 10.0
    retry_initial_seconds: float = 1.0
    maximum_attempts: int = 20


class LoopActivity:
    """The activity: build the loop for a spec and run or resume it, heartbeating."""

    def __init__(
        self,
        loop_factory: Callable[[LoopSpec], Loop],
        *,
        heartbeat_every: float = 1.0,
        on_outcome: Callable[[LoopSpec, LoopOutcome], None] | None = None,
    ) -> None:
        self._factory = loop_factory
        self._every = heartbeat_every
        self._on_outcome = on_outcome

    @activity.defn(name=ACTIVITY)
    async def run_loop(self, spec: dict[str, Any]) -> dict[str, Any]:
        """Run or resume the loop; a failure Temporal should not retry is non-retryable."""
        beating = asyncio.create_task(self._heartbeat())
        loop_spec = LoopSpec.from_dict(spec)
        try:
            outcome = await InProcessRunner(self._factory).run(loop_spec)
            if self._on_outcome is not None:
                self._on_outcome(loop_spec, outcome)
        except KeelgateError as exc:
            raise ApplicationError(
                exc.message, exc.detail, type=exc.code, non_retryable=exc.code in NON_RETRYABLE
            ) from exc
        finally:
            beating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beating
        return outcome.to_dict()

    async def _heartbeat(self) -> None:
        while True:
            activity.heartbeat()
            await asyncio.sleep(self._every)


class TemporalRunner:
    """Starts a run as a workflow and waits for its outcome. Safe to call again."""

    def __init__(
        self,
        client: Client,
        *,
        task_queue: str,
        retry: RetryOptions | None = None,
        workflow_id_prefix: str = "keelgate",
    ) -> None:
        self.client = client
        self.task_queue = task_queue
        self.retry = retry or RetryOptions()
        self.prefix = workflow_id_prefix

    def workflow_id(self, spec: LoopSpec) -> str:
        """One workflow id per run, so a second start of a live run joins it."""
        return f"{self.prefix}:{spec.tenant_id}:{spec.run_id}"

    async def run(self, spec: LoopSpec) -> LoopOutcome:
        """Execute the workflow for ``spec`` and return its outcome."""
        from temporalio.common import WorkflowIDConflictPolicy

        request = {"spec": spec.to_dict(), "options": self.retry.__dict__}
        data: dict[str, Any] = await self.client.execute_workflow(
            KeelgateLoopWorkflow.run,
            request,
            id=self.workflow_id(spec),
            task_queue=self.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        )
        return LoopOutcome.from_dict(data)


def temporal_worker(
    client: Client,
    *,
    task_queue: str,
    loop_factory: Callable[[LoopSpec], Loop],
    heartbeat_every: float = 1.0,
    on_outcome: Callable[[LoopSpec, LoopOutcome], None] | None = None,
) -> Worker:
    """A Temporal worker that runs Keelgate loops built by ``loop_factory``."""
    activity_impl = LoopActivity(loop_factory, heartbeat_every=heartbeat_every, on_outcome=on_outcome)
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[KeelgateLoopWorkflow],
        activities=[activity_impl.run_loop],
    )
