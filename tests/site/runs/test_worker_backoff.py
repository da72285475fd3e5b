"""When the worker backs off: after a failed claim (no database), not after a failed step."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.db import OperationalError

from runs.engine.worker import Claim, Worker


def _claim(n: int) -> Claim:
    return Claim(
        pk=n,
        tenant_id="t1",
        run_id=f"r{n}",
        agent="trader",
        goal="buy",
        epoch=1,
        as_of=datetime(2026, 11, 1, tzinfo=UTC),
    )


def _serve(worker: Worker, claims: list[Any], executions: list[Any]) -> list[float]:
    """Serve over scripted claims and executions (an exception is raised); return the waits."""
    waits: list[float] = []

    def claim() -> Claim | None:
        got = claims.pop(0)
        if not claims:
            worker.stopping.set()
        if isinstance(got, Exception):
            raise got
        return got

    def execute(claim: Claim) -> str:
        got = executions.pop(0)
        if isinstance(got, Exception):
            raise got
        return str(got)

    def wait(timeout: float) -> bool:
        waits.append(timeout)
        return worker.stopping.is_set()

    worker.claim = claim  # type: ignore[method-assign]
    worker.execute = execute  # type: ignore[method-assign]
    worker.stopping.wait = wait  # type: ignore[method-assign]
    worker._serve(once=False)
    return waits


def test_failed_steps_do_not_slow_the_worker_down():
    """Six steps in a row hit a killed session: each next claim comes one poll later, not a backoff later."""
    worker = Worker(poll_seconds=0.05)
    failures = [OperationalError("terminating connection due to administrator command")] * 6
    waits = _serve(worker, [_claim(n) for n in range(7)], [*failures, "done"])
    assert waits == [0.05] * 6


def test_failed_claims_back_off_twice_as_long_each_time_up_to_ten_seconds():
    """No database: the worker waits 0.05, 0.1, 0.2 ... at most 10 s; a claim that works resets it."""
    worker = Worker(poll_seconds=0.05)
    down = OperationalError("connection refused")
    claims: list[Any] = [down] * 10 + [_claim(1), down]
    waits = _serve(worker, claims, ["done"])
    assert waits[:10] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 10.0, 10.0]
    assert waits[10] == 0.05  # the claim that worked reset it
