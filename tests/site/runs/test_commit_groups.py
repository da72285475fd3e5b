"""The ORM stores group a loop's writes: a step commits 7 times, and a lost lease stops it."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest
from django.db import connection, connections

from audit.selectors import audit_verify
from keelgate.errors import LeaseLostError
from keelgate.gateway import Gateway, Grants
from keelgate.loop import Loop, Plan, ProposedAction, StopConditions
from keelgate.testing import Ledger, ScriptedPlanner, trading_tools
from runs.engine.fencing import Fence
from runs.engine.loops import database_stores
from runs.models import Checkpoint, Run, RunStatus

pytestmark = pytest.mark.django_db(transaction=True)

AS_OF = datetime(2026, 11, 1, 9, 30, tzinfo=UTC)
SCRIPT = [
    Plan(
        actions=[
            ProposedAction("get_quote", {"symbol": "ACME"}),
            ProposedAction("place_order", {"symbol": "ACME", "side": "buy", "quantity": 10}),
        ]
    ),
    Plan(final_answer="bought"),
]


def _loop(ledger: Ledger, epoch: int = 1) -> Loop:
    checkpoints, idempotency, audit = database_stores(Fence("t1", "r1", epoch))
    gateway = Gateway(
        trading_tools(ledger), grants=Grants({"trader": ["*"]}), idempotency=idempotency, audit=audit
    )
    return Loop(
        planner=ScriptedPlanner(SCRIPT),
        gateway=gateway,
        checkpoints=checkpoints,
        stop=StopConditions(max_iterations=5),
    )


def _run(loop: Loop, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, int]:
    """Drive the run as the worker does (inside an event loop) and count its commits."""
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

    async def go() -> tuple[Any, int]:
        conn = connections["default"]
        commits = 0
        original = conn.commit

        def commit() -> None:
            nonlocal commits
            # PostgreSQL: not when the COMMIT already went with the writes (counted below)
            commits += conn.vendor != "postgresql" or conn.connection.info.transaction_status != 0
            original()

        def fused(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
            nonlocal commits
            commits += sql.endswith("; COMMIT")
            return execute(sql, params, many, context)

        conn.commit = commit  # type: ignore[method-assign]
        try:
            with conn.execute_wrapper(fused):
                result = await loop.run(
                    goal="buy", tenant_id="t1", agent_id="trader", as_of=AS_OF, run_id="r1"
                )
        finally:
            del conn.commit
            conn.close()
        return result, commits

    return asyncio.run(go())


def _leased_run(epoch: int = 1) -> None:
    Run.objects.create(
        tenant_id="t1",
        run_id="r1",
        agent="trader",
        goal="buy",
        as_of=AS_OF,
        status=RunStatus.RUNNING,
        lease_epoch=epoch,
    )


def test_a_step_on_the_database_stores_commits_seven_times_five_on_postgresql(tmp_path, monkeypatch):
    """Start, plan, READ + the WRITE's key claim, the WRITE's key + audit, its checkpoints, answer, stop.

    On PostgreSQL writes that never reached the server wait at a barrier for the next
    flush: the start (its audit event linked by the server) commits with the first plan,
    the WRITE's checkpoints with the next one. Five.
    """
    _leased_run()
    ledger = Ledger(tmp_path / "ledger.sqlite3")
    try:
        result, commits = _run(_loop(ledger), monkeypatch)
        assert result.goal_reached
        assert commits == (5 if connection.vendor == "postgresql" else 7)
        assert ledger.count() == 1
    finally:
        ledger.close()
    assert Checkpoint.objects.filter(run_id="r1").count() == result.state.seq == 9  # every phase still saved
    run = Run.objects.get(run_id="r1")
    assert (run.seq, run.phase, run.stop_reason) == (9, "done", "goal_reached")
    assert run.usage["model_calls"] == 2 and run.limits["max_iterations"] == 5  # JSON, not text
    assert audit_verify(tenant_id="t1").ok


def test_a_worker_whose_lease_was_taken_writes_nothing(tmp_path, monkeypatch):
    """The fence is checked at the first write of every grouped transaction: epoch 1 is stale."""
    _leased_run(epoch=2)
    ledger = Ledger(tmp_path / "ledger.sqlite3")
    try:
        with pytest.raises(LeaseLostError):
            _run(_loop(ledger, epoch=1), monkeypatch)
        assert ledger.count() == 0
    finally:
        ledger.close()
    assert not Checkpoint.objects.filter(run_id="r1").exists()
    assert Run.objects.get(run_id="r1").seq == 0
