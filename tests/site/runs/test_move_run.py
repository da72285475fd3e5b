"""A run moves from the engine's SQLite stores to the Django stores and resumes there.

The paper-trader agent runs on the engine alone (SqliteCheckpointStore, SQLite keys and
audit) until it waits for approval. Its latest checkpoint JSON, read back through a
fresh engine store (both stores keep it deflated, never as plain JSON), is saved
unchanged into the Django checkpoint store beside a Run row; the inbox picks up the
approval, a person approves it through the service, and the worker finishes the run:
the JSON is the same on both sides (load and history) and the order executes exactly
once.
"""

from __future__ import annotations

import asyncio
import sqlite3

from django.utils import timezone

from approvals.models import Approval, ApprovalStatus
from approvals.services import approval_decide
from audit.selectors import audit_verify
from keelgate.audit import SqliteAuditLog
from keelgate.checkpoint import SqliteCheckpointStore
from keelgate.gateway import Gateway, Grants
from keelgate.idempotency import SqliteIdempotencyStore
from keelgate.loop import ActionStatus, Loop, LoopState, Phase, StopReason
from runs.agents import load_agent
from runs.agents.brokerage import PaperBrokerage
from runs.engine.stores import DjangoCheckpointStore
from runs.engine.worker import Worker
from runs.models import Checkpoint, Run, RunStatus


def test_a_run_checkpointed_by_the_engine_resumes_in_the_django_stores(operator, brokerage_path, tmp_path):
    """Same LoopState JSON after the move; approved through the service, the worker finishes it once."""
    agent = load_agent("paper-trader")
    checkpoints = SqliteCheckpointStore(tmp_path / "checkpoints.sqlite3")
    keys = SqliteIdempotencyStore(tmp_path / "keys.sqlite3")
    audit = SqliteAuditLog(tmp_path / "audit.sqlite3")
    try:
        gateway = Gateway(
            agent.tools,
            grants=Grants({agent.name: agent.grants}),
            idempotency=keys,
            audit=audit,
            policy=agent.policy,
        )
        loop = Loop(
            planner=agent.planner,
            gateway=gateway,
            checkpoints=checkpoints,
            verifier=agent.verifier,
            stop=agent.stop,
        )
        result = asyncio.run(
            loop.run_or_resume(
                goal="buy 4 ACME",
                tenant_id="t1",
                agent_id="paper-trader",
                as_of=timezone.now(),
                run_id="moved",
            )
        )
        assert result.stop_reason is StopReason.APPROVAL_PENDING
        engine_state = checkpoints.load("t1", "moved")
        assert engine_state is not None
    finally:
        checkpoints.close()
        keys.close()
        audit.close()
    with SqliteCheckpointStore(tmp_path / "checkpoints.sqlite3") as reopened:  # a store that saved nothing
        engine_text = reopened.load("t1", "moved").to_json()
        engine_history = [s.to_json() for s in reopened.history("t1", "moved")]
    assert engine_text == engine_state.to_json() == engine_history[-1]
    with sqlite3.connect(tmp_path / "checkpoints.sqlite3") as raw:  # stored deflated, not as JSON
        stored = raw.execute("SELECT state, data FROM checkpoints WHERE run_id = 'moved'").fetchall()
    assert stored and all(text == "" and len(data) < len(engine_text) for text, data in stored)

    Run.objects.create(
        tenant_id="t1",
        run_id="moved",
        agent="paper-trader",
        goal=engine_state.goal,
        as_of=engine_state.as_of,
        trace_id=engine_state.trace_id,
        status=RunStatus.WAITING,
        created_by="op",
    )
    DjangoCheckpointStore().save(LoopState.from_json(engine_text))

    moved = DjangoCheckpointStore().load("t1", "moved")
    assert moved is not None and moved.to_json() == engine_text
    assert [s.to_json() for s in DjangoCheckpointStore().history("t1", "moved")] == [engine_text]
    assert Checkpoint.objects.filter(tenant_id="t1", run_id="moved").count() == 1
    run = Run.objects.get(tenant_id="t1", run_id="moved")
    assert (run.seq, run.phase, run.stop_reason) == (
        engine_state.seq,
        engine_state.phase.value,
        "approval_pending",
    )

    approval = Approval.objects.get(tenant_id="t1", run_id="moved")
    assert approval.status == ApprovalStatus.PENDING and approval.tool == "place_order"
    approval_decide(
        tenant_id="t1", approval_id=approval.pk, user=operator, decision="approve", note="moved ok"
    )
    worker = Worker(lease_seconds=30)
    while worker.run_once():
        pass

    run.refresh_from_db()
    assert run.status == RunStatus.DONE and run.stop_reason == "goal_reached"
    final = DjangoCheckpointStore().load("t1", "moved")
    assert final.phase is Phase.DONE and final.final_answer == "Bought 4 ACME at 101.5 (order PB-000001)."
    order = next(a for a in final.actions if a.tool == "place_order")
    assert order.status is ActionStatus.DONE and not order.outcome.replayed
    assert [(e.key, e.executions, e.replays) for e in PaperBrokerage().ledger()] == [
        (order.idempotency_key, 1, 0)
    ]
    history = DjangoCheckpointStore().history("t1", "moved")
    assert history[0].to_json() == engine_state.to_json()
    assert [s.seq for s in history] == list(range(engine_state.seq, engine_state.seq + len(history)))
    assert audit_verify(tenant_id="t1").ok
