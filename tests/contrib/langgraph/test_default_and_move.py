"""default_checkpointer picks the LangGraph store when installed; runs move between stores."""

from __future__ import annotations

from keelgate.checkpoint import SqliteCheckpointStore, default_checkpointer
from keelgate.contrib.langgraph import LangGraphCheckpointStore
from keelgate.gateway import RequireApproval
from keelgate.loop import Loop, StopReason
from tests.conftest import act, answer, buy, quote


def test_default_checkpointer_is_the_langgraph_store_when_installed(tmp_path):
    """With keelgate[langgraph] installed, default_checkpointer returns its SQLite store."""
    store = default_checkpointer(tmp_path / "d.sqlite3")
    assert isinstance(store, LangGraphCheckpointStore)
    store.close()


async def test_a_run_moves_from_langgraph_to_sqlite_and_finishes_there(world, tmp_path):
    """Stopped for approval in the LangGraph store, copied as the same JSON, resumed on SQLite."""
    w = world([act(quote(), buy()), answer("bought")], policy=RequireApproval(["place_order"]))
    base = w.loop()
    lg = LangGraphCheckpointStore.sqlite(tmp_path / "lg.sqlite3")
    loop = Loop(planner=base.planner, gateway=base.gateway, checkpoints=lg, clock=w.clock)
    result = await w.start(loop)
    assert result.stop_reason is StopReason.APPROVAL_PENDING
    loop.approve("t1", "run-1", "1-2", by="alice")
    state = lg.load("t1", "run-1")
    target = SqliteCheckpointStore(tmp_path / "moved.sqlite3")
    target.save(state)
    assert target.load("t1", "run-1").to_json() == state.to_json()
    moved = Loop(planner=base.planner, gateway=base.gateway, checkpoints=target, clock=w.clock)
    result = await moved.resume("t1", "run-1")
    assert result.goal_reached and w.ledger.count() == 1
    lg.close()
    target.close()
