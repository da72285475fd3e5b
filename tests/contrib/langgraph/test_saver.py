"""KeelgateSaver: LangGraph's conformance suite, tenants, write ownership, commit order, bad blobs."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from langgraph.checkpoint.conformance import validate
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)

from keelgate.contrib.langgraph import KeelgateSaver
from keelgate.errors import CheckpointUnreadableError, StaleOwnerError
from keelgate.sqlite import SqliteDatabase
from tests.contrib.langgraph.conformance import REQUIRED, keelgate_async_sqlite, keelgate_sqlite, pass_counts

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("registered", [keelgate_sqlite, keelgate_async_sqlite], ids=lambda r: r.name)
def test_langgraph_conformance_suite_passes_in_full(registered, capsys):
    """Every capability LangGraph's suite knows is implemented, and every one of its tests passes."""
    report = asyncio.run(validate(registered))
    with capsys.disabled():
        print(f"\n{registered.name}\n{pass_counts(report)}")
    assert {name for name, r in report.results.items() if r.detected} >= REQUIRED
    failures = [f for r in report.results.values() for f in r.failures]
    assert failures == []
    assert report.conformance_level() == "FULL"
    assert sum(r.tests_passed for r in report.results.values()) >= 81


def put(saver: KeelgateSaver, thread: str, **values: object) -> dict:
    checkpoint = generate_checkpoint(channel_values=dict(values), channel_versions=dict.fromkeys(values, 1))
    return saver.put(generate_config(thread), checkpoint, generate_metadata(), dict.fromkeys(values, 1))


def test_a_thread_of_another_tenant_is_absent(tmp_path):
    """Tenant B sees, lists, copies and deletes nothing of tenant A's thread of the same id."""
    acme = KeelgateSaver.sqlite(tmp_path / "g.sqlite3", tenant_id="acme")
    globex = acme.for_tenant("globex")
    stored = put(acme, "t1", secret="acme-only")
    acme.put_writes(stored, [("ch", "w")], "task-1")

    assert globex.get_tuple(generate_config("t1")) is None
    assert globex.get_tuple(stored) is None
    assert list(globex.list(None)) == []
    assert list(globex.list(generate_config("t1"))) == []
    globex.copy_thread("t1", "stolen")
    assert list(globex.list(None)) == []
    globex.delete_thread("t1")
    globex.prune(["t1"], strategy="delete")
    globex.delete_for_runs([str(m.metadata.get("run_id")) for m in acme.list(None)])
    mine = acme.get_tuple(generate_config("t1"))
    assert mine is not None and mine.checkpoint["channel_values"] == {"secret": "acme-only"}
    assert [w[2] for w in mine.pending_writes or []] == ["w"]


def test_a_superseded_owner_can_write_nothing(tmp_path):
    """Once another owner takes the thread, the old one's put and put_writes raise stale_owner."""
    saver = KeelgateSaver.sqlite(tmp_path / "g.sqlite3", tenant_id="acme")
    first = saver.acquire("t1", owner="A", lease_seconds=0.05)
    assert first is not None and first.epoch == 1
    stored = put(saver.owned(first), "t1", n=1)
    assert saver.acquire("t1", owner="B") is None  # A's lease is live
    time.sleep(0.1)
    second = saver.acquire("t1", owner="B")
    assert second is not None and second.epoch == 2
    old = saver.owned(first)
    with pytest.raises(StaleOwnerError) as refused:
        put(old, "t1", n=2)
    assert refused.value.code == "stale_owner"
    with pytest.raises(StaleOwnerError):
        old.put_writes(stored, [("ch", "late")], "task-1")
    with pytest.raises(StaleOwnerError):
        old.delete_thread("t1")
    with pytest.raises(StaleOwnerError):
        put(saver, "t1", n=3)  # an unowned saver may not write an owned thread either
    assert old.renew(first) is None
    latest = saver.get_tuple(generate_config("t1"))
    assert latest is not None and latest.checkpoint["channel_values"] == {"n": 1}
    assert latest.pending_writes == []
    put(saver.owned(second), "t1", n=4)
    assert saver.release(second)
    put(saver, "t1", n=5)  # released: unowned writes again


def test_a_lease_is_for_its_own_thread(tmp_path):
    """A lease of one thread does not let its holder write another, owned or not."""
    saver = KeelgateSaver.sqlite(tmp_path / "g.sqlite3", tenant_id="acme")
    lease = saver.acquire("t1", owner="A", now=datetime.now(UTC) - timedelta(seconds=1))
    assert lease is not None
    with pytest.raises(StaleOwnerError):
        put(saver.owned(lease), "t2", n=1)


def child(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.contrib.langgraph.graph_child", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
def _stop_outside_the_write_lock(pid: int, db: str) -> None:
    """Leave the SIGSTOPped owner stopped where it holds no write lock on ``db``.

    ``kill(SIGSTOP)`` returns before the signal takes effect, and the owner may be frozen
    finishing its last commit: the taker-over's ``BEGIN IMMEDIATE`` would then wait for a
    lock that is never released. So wait until the kernel shows it stopped, probe the
    lock, and let it run on a little while it holds one.
    """
    for _ in range(200):
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] in ("T", "t"):
                    break
            time.sleep(0.0005)
        probe = sqlite3.connect(db, timeout=0, isolation_level=None)
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.execute("ROLLBACK")
            return
        except sqlite3.OperationalError:
            pass
        finally:
            probe.close()
        os.kill(pid, signal.SIGCONT)
        time.sleep(0.002)
        os.kill(pid, signal.SIGSTOP)
    pytest.fail("the owner stayed frozen holding the write lock")


def test_a_frozen_owner_woken_after_a_takeover_is_refused(tmp_path):
    """SIGSTOP the owner mid-node past its lease, take over and finish, SIGCONT: its writes are refused."""
    db, ledger = str(tmp_path / "g.sqlite3"), str(tmp_path / "ledger")
    a = child(db, "t1", ledger, "owned", "2")
    assert a.stdout is not None
    assert a.stdout.readline().strip() == "epoch=1"
    assert a.stdout.readline().strip() == "waiting"
    os.kill(a.pid, signal.SIGSTOP)
    _stop_outside_the_write_lock(a.pid, db)
    try:
        time.sleep(2.4)  # past A's lease
        saver = KeelgateSaver.sqlite(db, tenant_id="acme")
        lease = saver.acquire("t1", owner="B")
        assert lease is not None and lease.epoch == 2
        from tests.contrib.langgraph.graph_child import build

        graph = build(Path(ledger)).compile(checkpointer=saver.owned(lease))
        assert graph.invoke(None, {"configurable": {"thread_id": "t1"}}, durability="sync")["total"] == 11
        before = [(t.checkpoint["id"], len(t.pending_writes or [])) for t in saver.list(None)]
        Path(ledger + ".go").touch()
    finally:
        os.kill(a.pid, signal.SIGCONT)
    out, err = a.communicate(timeout=30)
    assert a.returncode == 3, err
    assert "refused=stale_owner" in out
    after = [(t.checkpoint["id"], len(t.pending_writes or [])) for t in saver.list(None)]
    assert after == before  # not one checkpoint or write of A's landed
    latest = saver.get_tuple({"configurable": {"thread_id": "t1"}})
    assert latest is not None and latest.checkpoint["channel_values"]["total"] == 11


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["crash-after-writes", "crash-after-put"])
def test_a_kill_between_writes_and_checkpoint_does_not_run_the_node_again(tmp_path, mode):
    """Killed just after a task's writes (or the next checkpoint) commit, resuming does not re-run it."""
    db, ledger = str(tmp_path / "g.sqlite3"), tmp_path / "ledger"
    crashed = child(db, "t1", str(ledger), mode)
    crashed.communicate(timeout=60)
    assert crashed.returncode == 137
    assert ledger.read_text().count("charge") == 1
    resumed = child(db, "t1", str(ledger), "resume")
    out, err = resumed.communicate(timeout=60)
    assert resumed.returncode == 0, err
    assert "total=11" in out
    assert ledger.read_text().count("charge") == 1


def test_an_unreadable_blob_is_a_clear_error_and_loses_nothing(tmp_path):
    """A blob that cannot be deserialised raises checkpoint_unreadable; the thread's other rows stay."""
    db = SqliteDatabase(tmp_path / "g.sqlite3")
    saver = KeelgateSaver.sqlite(db, tenant_id="acme")
    first = put(saver, "t1", n=1)
    second = saver.put(
        generate_config("t1", checkpoint_id=first["configurable"]["checkpoint_id"]),
        generate_checkpoint(channel_values={"n": 2}, channel_versions={"n": 2}),
        generate_metadata(step=1),
        {"n": 2},
    )
    for garbage in (b"\xff\x00 not msgpack", b"\xc1"):  # decodes to -1; does not decode
        with db.write() as conn:
            conn.execute(
                "UPDATE kg_graph_checkpoints SET checkpoint = ? WHERE checkpoint_id = ?",
                (garbage, second["configurable"]["checkpoint_id"]),
            )
        with pytest.raises(CheckpointUnreadableError) as unreadable:
            saver.get_tuple(generate_config("t1"))
        assert unreadable.value.code == "checkpoint_unreadable"
        with pytest.raises(CheckpointUnreadableError):
            list(saver.list(generate_config("t1")))
    older = saver.get_tuple(first)
    assert older is not None and older.checkpoint["channel_values"] == {"n": 1}


def test_a_saver_needs_a_tenant(tmp_path):
    """An empty tenant is a configuration error, not a shared namespace."""
    from keelgate.errors import ConfigurationError

    with pytest.raises(ConfigurationError):
        KeelgateSaver.sqlite(tmp_path / "g.sqlite3", tenant_id="")
    assert uuid.UUID(int=0)  # keeps the import honest for ids used above
