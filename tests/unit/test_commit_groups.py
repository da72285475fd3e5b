"""Commit grouping: stores on one SQLite file share commits between a loop's barriers."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import pytest

from keelgate.audit import SqliteAuditLog, verify
from keelgate.checkpoint import SqliteCheckpointStore
from keelgate.commits import NO_GROUP, shared_group
from keelgate.errors import StaleCheckpointError
from keelgate.idempotency import SqliteIdempotencyStore
from keelgate.loop import LoopState, Plan
from keelgate.sqlite import SqliteDatabase, SqliteStores
from tests.conftest import AS_OF, World, answer, buy, quote


class Commits:
    """Counts COMMIT statements on a connection."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.count = 0
        conn.set_trace_callback(self._seen)

    def _seen(self, sql: str) -> None:
        if sql.strip().upper() == "COMMIT":
            self.count += 1


def _other(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(str(path), isolation_level=None)


def _events(path: Path) -> int:
    with _other(path) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM audit_events").fetchone()[0])


def test_only_stores_on_one_database_form_a_group(tmp_path: Path) -> None:
    with SqliteStores(tmp_path / "one.sqlite3") as stores:
        group = shared_group(stores.checkpoints, stores.idempotency, stores.audit)
        assert group is stores.database
    a = SqliteAuditLog(tmp_path / "a.sqlite3")
    c = SqliteCheckpointStore(tmp_path / "c.sqlite3")
    try:
        assert shared_group(c, a) is NO_GROUP
        assert shared_group(object(), a) is NO_GROUP
    finally:
        a.close()
        c.close()


def test_held_writes_commit_once_at_flush_and_are_invisible_before(tmp_path: Path) -> None:
    path = tmp_path / "one.sqlite3"
    with SqliteStores(path) as stores:
        commits = Commits(stores.database.conn)
        stores.database.hold()
        for n in range(3):
            stores.audit.append("t", actor="a", kind="k", body={"n": n})
        assert commits.count == 0
        assert _events(path) == 0  # another connection sees nothing yet
        assert len(list(stores.audit.events("t"))) == 3  # the holder reads its own writes
        stores.database.flush()
        assert commits.count == 1 and _events(path) == 3
        stores.audit.append("t", actor="a", kind="k", body={"n": 3})
        stores.database.release()
        assert commits.count == 2 and _events(path) == 4
        stores.audit.append("t", actor="a", kind="k", body={"n": 4})  # not held: commits alone
        assert commits.count == 3
        assert verify(stores.audit, "t").ok


def test_a_database_error_drops_the_whole_unflushed_group(tmp_path: Path) -> None:
    """A half-done write cannot be committed: the group goes, as in a crash; the next write starts afresh."""
    path = tmp_path / "one.sqlite3"
    with SqliteStores(path) as stores:
        stores.database.hold()
        stores.audit.append("t", actor="a", kind="k", body={"n": 1})
        stores.database.flush()
        stores.audit.append("t", actor="a", kind="k", body={"n": 2})
        with pytest.raises(sqlite3.IntegrityError), stores.database.write() as conn:
            conn.execute(
                "INSERT INTO audit_events VALUES ('t', 99, 'at', 'a', 'k', '{}', 'p', 'h')"
            )  # written, then dropped with the rest of the group
            conn.execute("INSERT INTO audit_events (tenant_id) VALUES ('x')")
        stores.audit.append("t", actor="a", kind="k", body={"n": 3})
        stores.database.release()
        assert [e.body["n"] for e in stores.audit.events("t")] == [1, 3]
        assert _events(path) == 2


def test_a_stores_own_error_leaves_the_group_as_it_was(tmp_path: Path) -> None:
    """A stale save raises before it writes: the writes before it still commit at the flush."""
    world = World(tmp_path, [answer("x")], one_file=True)
    world.loop()
    stores = world.checkpoints
    assert stores is not None and world.audit is not None
    state = LoopState(tenant_id="t", run_id="r", agent_id="a", goal="g", as_of=AS_OF, trace_id="x", seq=2)
    try:
        stores.save(state)
        stores.commit_group.hold()
        world.audit.append("t", actor="a", kind="k", body={})
        state.seq = 1
        with pytest.raises(StaleCheckpointError):
            stores.save(state)
        stores.commit_group.release()
        assert len(list(world.audit.events("t"))) == 1
        assert stores.load("t", "r").seq == 2  # type: ignore[union-attr]
    finally:
        world.close()


def test_a_barrier_commits_on_sqlite_where_the_first_write_holds_the_lock(tmp_path: Path) -> None:
    """Outside code must not run while the file is locked: an SQLite group's barrier is a flush."""
    path = tmp_path / "one.sqlite3"
    with SqliteStores(path) as stores:
        commits = Commits(stores.database.conn)
        stores.database.hold()
        stores.audit.append("t", actor="a", kind="k", body={})
        stores.database.barrier()
        assert commits.count == 1 and _events(path) == 1
        with _other(path) as other:  # the lock is free for another writer
            other.execute("BEGIN IMMEDIATE")
            other.execute("ROLLBACK")
        stores.database.release()


def test_discard_drops_unflushed_writes_as_a_crash_would(tmp_path: Path) -> None:
    path = tmp_path / "one.sqlite3"
    with SqliteStores(path) as stores:
        stores.database.hold()
        stores.audit.append("t", actor="a", kind="k", body={"n": 1})
        stores.database.flush()
        stores.audit.append("t", actor="a", kind="k", body={"n": 2})
        stores.database.discard()
        assert _events(path) == 1
        stores.audit.append("t", actor="a", kind="k", body={"n": 2})
        assert _events(path) == 2


def test_another_thread_waits_for_the_flush_and_commits_on_its_own(tmp_path: Path) -> None:
    path = tmp_path / "one.sqlite3"
    with SqliteStores(path) as stores:
        stores.database.hold()
        stores.audit.append("t", actor="holder", kind="k", body={})
        done = threading.Event()

        def other() -> None:
            stores.audit.append("t", actor="other", kind="k", body={})
            done.set()

        thread = threading.Thread(target=other)
        thread.start()
        assert not done.wait(0.3), "the other thread wrote into the holder's open transaction"
        stores.database.discard()  # the holder's write goes; the other's must not
        thread.join(5)
        assert done.is_set()
        assert [e.actor for e in stores.audit.events("t")] == ["other"]


async def test_another_task_on_the_holders_thread_is_refused(tmp_path: Path) -> None:
    with SqliteStores(tmp_path / "one.sqlite3") as stores:

        async def holder(started: asyncio.Event, go: asyncio.Event) -> None:
            stores.database.hold()
            stores.audit.append("t", actor="holder", kind="k", body={})
            started.set()
            await go.wait()  # a yield with the transaction open: the bug being refused
            stores.database.release()

        started, go = asyncio.Event(), asyncio.Event()
        task = asyncio.create_task(holder(started, go))
        await started.wait()
        with pytest.raises(RuntimeError, match="held commit group"):
            stores.audit.append("t", actor="intruder", kind="k", body={})
        go.set()
        await task
        assert [e.actor for e in stores.audit.events("t")] == ["holder"]


def test_stores_on_one_database_close_together(tmp_path: Path) -> None:
    db = SqliteDatabase(tmp_path / "one.sqlite3")
    keys = SqliteIdempotencyStore(db)
    SqliteCheckpointStore(db).close()
    with pytest.raises(sqlite3.ProgrammingError):
        keys.get("t", "k")
    db.close()  # idempotent


@pytest.mark.parametrize(("one_file", "commits"), [(False, 17), (True, 7)])
async def test_a_step_commits_this_often(tmp_path: Path, one_file: bool, commits: int) -> None:
    """Plan, READ, WRITE, observe, answer, verify: 17 commits on three files, 7 on one.

    The seven: start, plan, READ's checkpoint with the WRITE's key claim (before the
    tool), the key's completion (right after it), the WRITE's checkpoints up to the
    next plan, the answer, the verdict with the stop.
    """
    world = World(tmp_path, [Plan(actions=[quote(), buy()]), answer("bought")], one_file=one_file)
    loop = world.loop()
    try:
        stores = (world.checkpoints, world.keys, world.audit)
        conns = {id(s.commit_group.conn): s.commit_group.conn for s in stores if s is not None}
        counters = [Commits(conn) for conn in conns.values()]
        assert len(counters) == (1 if one_file else 3)
        result = await world.start(loop)
        assert result.goal_reached
        assert sum(c.count for c in counters) == commits
        assert world.audit is not None and verify(world.audit, "t1").ok
    finally:
        world.close()
