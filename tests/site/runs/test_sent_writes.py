"""Writes sent ahead of their answers (sitekit.postgresql.commits): what a held transaction guarantees."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest
from django.db import connection, connections, transaction

from audit.wiring import audit_log
from keelgate.errors import StaleCheckpointError
from keelgate.loop import LoopState
from runs.engine.loops import commit_group, database_stores
from runs.models import Checkpoint, Run, RunStatus
from tenants.models import Tenant
from tests.site.runs._batch import require_postgres
from tests.site.runs.test_commit_groups import _leased_run, _loop

pytestmark = pytest.mark.django_db(transaction=True)

AS_OF = datetime(2026, 11, 1, 9, 30, tzinfo=UTC)


def _state(seq: int) -> LoopState:
    return LoopState(
        tenant_id="t1", run_id="r1", agent_id="trader", goal="buy", as_of=AS_OF, seq=seq, trace_id="tr"
    )


def _run_at(seq: int) -> None:
    Run.objects.create(
        tenant_id="t1",
        run_id="r1",
        agent="trader",
        goal="buy",
        as_of=AS_OF,
        status=RunStatus.RUNNING,
        seq=seq,
    )


def test_a_stale_save_in_a_held_transaction_is_refused_by_the_flush_at_the_latest():
    """A save below the run's seq raises StaleCheckpointError by the flush at the latest; none of it lands."""
    _run_at(3)
    checkpoints, _, _ = database_stores()
    group = checkpoints.commit_group
    group.hold()
    with pytest.raises(StaleCheckpointError):
        try:
            checkpoints.save(_state(2))
        finally:
            group.release()
    assert not Checkpoint.objects.filter(run_id="r1").exists()
    assert Run.objects.get(run_id="r1").seq == 3


def test_the_writes_of_a_failed_transaction_are_refused_until_it_ends():
    """After a refused sent write, later writes of the held transaction raise too; none of them lands."""
    require_postgres("SQLite runs each write at once: a refused one leaves the others to the flush")
    _run_at(3)
    checkpoints, _, audit = database_stores()
    group = checkpoints.commit_group
    group.hold()
    try:
        with pytest.raises(StaleCheckpointError):
            checkpoints.save(_state(2))
            audit.append("t1", actor="test", kind="probe", body={})  # sends the stale save with it
        with pytest.raises(StaleCheckpointError):
            checkpoints.save(_state(4))
    finally:
        group.release()
    assert not Checkpoint.objects.filter(run_id="r1").exists()
    assert audit.head("t1") is None
    checkpoints.save(_state(4))  # the next transaction starts afresh
    assert Run.objects.get(run_id="r1").seq == 4


def test_a_read_in_a_held_transaction_sees_the_writes_sent_before_it():
    """An ORM query inside the held transaction first sends the writes waiting before it."""
    _run_at(0)
    checkpoints, _, audit = database_stores()
    group = checkpoints.commit_group
    group.hold()
    try:
        checkpoints.save(_state(1))
        event = audit.append("t1", actor="test", kind="probe", body={"n": 1})
        assert Checkpoint.objects.filter(run_id="r1").count() == 1
        assert checkpoints.load("t1", "r1") == _state(1)
        assert audit.head("t1") == event
    finally:
        group.release()
    assert Run.objects.get(run_id="r1").seq == 1


def test_two_appends_in_one_transaction_are_numbered_in_order():
    """Two appends of one transaction take the next two numbers; the log verifies."""
    from audit.selectors import audit_verify

    group = commit_group()
    _, _, audit = database_stores()
    audit.commit_group = group
    group.hold()
    try:
        first = audit.append("t1", actor="a", kind="one", body={})
        second = audit.append("t1", actor="a", kind="two", body={})
    finally:
        group.release()
    assert (first.seq, second.seq) == (1, 2)
    assert audit_verify(tenant_id="t1").ok


def test_a_step_on_postgresql_takes_at_most_seven_round_trips(tmp_path, monkeypatch):
    """A step's transactions send their writes with the statements that need answers.

    Seven (it was nineteen, then eleven, then eight), the start's read of the run's
    checkpoint included: no key read for a call the run never planned; the fence and a
    worker's checkpoint saves checked by the server, so commits travel with the writes;
    the loop's audit events linked by the server (``record``), so no transaction waits
    for the chain's head; writes that never reached the server parked at a barrier, so
    the start commits with the first plan and the WRITE's checkpoints with the next one;
    and the WRITE's key claim commits in its own message.
    """
    require_postgres("round trips are PostgreSQL's cost")
    from keelgate.testing import Ledger

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    _leased_run()
    ledger = Ledger(tmp_path / "ledger.sqlite3")

    async def go() -> int:
        conn = connections["default"]
        trips = 0

        def count(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
            nonlocal trips
            trips += 1
            return execute(sql, params, many, context)

        original = conn.commit

        def commit() -> None:
            nonlocal trips
            trips += int(conn.connection.info.transaction_status != 0)  # not already committed
            original()

        conn.commit = commit  # type: ignore[method-assign]
        try:
            with conn.execute_wrapper(count):
                result = await _loop(ledger).run(
                    goal="buy", tenant_id="t1", agent_id="trader", as_of=AS_OF, run_id="r1"
                )
        finally:
            del conn.commit
            conn.close()
        assert result.goal_reached
        return trips

    try:
        trips = asyncio.run(go())
    finally:
        ledger.close()
    assert connection.vendor == "postgresql"
    assert trips <= 7, trips
    assert Checkpoint.objects.filter(run_id="r1").count() == 9


def test_a_sent_write_keeps_percent_signs_and_quotes_of_untrusted_text():
    """Bound on the client, a value with %s, %(x)s, quotes and a NUL-free backslash is stored as given."""
    _run_at(0)
    checkpoints, _, audit = database_stores()
    goal = "buy 100% of 'ACME'; -- %s %(x)s \\ \" ; DROP TABLE x"
    state = _state(1).model_copy(update={"goal": goal})
    group = checkpoints.commit_group
    group.hold()
    try:
        checkpoints.save(state)
        audit.append("t1", actor="test", kind="probe", body={"text": goal})
    finally:
        group.release()
    loaded = checkpoints.load("t1", "r1")
    assert loaded is not None and loaded.goal == goal
    head = audit.head("t1")
    assert head is not None and head.body == {"text": goal}


def test_a_lost_lease_is_refused_by_the_server_and_nothing_of_its_transaction_lands():
    """The server checks the fence (keelgate_refuse): LeaseLostError names both epochs; no write lands."""
    require_postgres("SQLite checks the fence on the client, at once")
    from keelgate.errors import LeaseLostError
    from runs.engine.fencing import Fence

    _run_at(0)
    Run.objects.filter(run_id="r1").update(lease_epoch=2)
    checkpoints, _, audit = database_stores(Fence("t1", "r1", 1))
    group = checkpoints.commit_group
    group.hold()
    try:
        with pytest.raises(LeaseLostError, match="r1 epoch 1 is not 2"):
            checkpoints.save(_state(1))
            audit.append("t1", actor="test", kind="probe", body={})  # its head lock sends the fence
        with pytest.raises(LeaseLostError):
            checkpoints.save(_state(2))  # the failed transaction refuses its later writes
    finally:
        group.release()
    assert not Checkpoint.objects.filter(run_id="r1").exists()
    assert audit.head("t1") is None
    assert Run.objects.get(run_id="r1").seq == 0


def test_writes_not_yet_sent_wait_at_a_barrier_and_commit_with_the_next_flush():
    """A barrier parks unsent writes: no transaction stays open, nobody sees them, the flush commits all."""
    require_postgres("SQLite writes at once, holding the file's lock: its barrier commits")
    _run_at(0)
    checkpoints, _, _ = database_stores()
    group = checkpoints.commit_group
    group.hold()
    try:
        checkpoints.save(_state(1))
        group.barrier()
        assert not connection.in_atomic_block
        assert connection.connection.info.transaction_status == 0  # idle: no lock held meanwhile
        assert not Checkpoint.objects.filter(run_id="r1").exists()  # outside code runs without them
        checkpoints.save(_state(2))
        group.flush()
        assert sorted(Checkpoint.objects.filter(run_id="r1").values_list("seq", flat=True)) == [1, 2]
    finally:
        group.release()
    assert Run.objects.get(run_id="r1").seq == 2


def test_a_crash_after_a_barrier_loses_only_the_parked_writes():
    """Parked writes are unflushed work: a discard (what a crash does) drops them; the next one is clean."""
    require_postgres("only PostgreSQL parks writes at a barrier")
    _run_at(0)
    checkpoints, _, _ = database_stores()
    group = checkpoints.commit_group
    group.hold()
    checkpoints.save(_state(1))
    group.barrier()
    group.discard()
    assert not Checkpoint.objects.filter(run_id="r1").exists()
    checkpoints.save(_state(1))
    assert Run.objects.get(run_id="r1").seq == 1


def test_a_barrier_commits_writes_that_reached_the_database():
    """Once a write was sent (an audit append locks the chain's head), the barrier commits, as flush does."""
    _run_at(0)
    checkpoints, _, audit = database_stores()
    group = checkpoints.commit_group
    group.hold()
    try:
        checkpoints.save(_state(1))
        audit.append("t1", actor="test", kind="probe", body={})
        group.barrier()
        assert not connection.in_atomic_block
        assert Checkpoint.objects.filter(run_id="r1").count() == 1
        assert audit.head("t1") is not None
    finally:
        group.release()


def test_the_groups_own_reads_see_the_writes_parked_at_a_barrier():
    """A query of the group after a barrier sends the parked writes first, in its transaction."""
    require_postgres("only PostgreSQL parks writes at a barrier")
    _run_at(0)
    checkpoints, _, _ = database_stores()
    group = checkpoints.commit_group
    group.hold()
    try:
        checkpoints.save(_state(1))
        group.barrier()
        rows = group.query('SELECT count(*) FROM "runs_checkpoint" WHERE "run_id" = %s', ["r1"]).rows
        assert rows == [(1,)]
    finally:
        group.release()
    assert Run.objects.get(run_id="r1").seq == 1


def test_starting_a_run_that_has_a_checkpoint_is_refused_before_anything_runs(tmp_path, monkeypatch):
    """run() of an id with a checkpoint raises RunExistsError: no planner call, no second run.started."""
    from keelgate.errors import RunExistsError
    from keelgate.testing import Ledger

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    _leased_run()
    ledger = Ledger(tmp_path / "ledger.sqlite3")
    try:
        loop = _loop(ledger)
        first = asyncio.run(loop.run(goal="buy", tenant_id="t1", agent_id="trader", as_of=AS_OF, run_id="r1"))
        assert first.goal_reached
        checkpoints, events = Checkpoint.objects.count(), list(audit_log().events("t1"))
        calls = loop.planner.calls  # type: ignore[attr-defined]
        with pytest.raises(RunExistsError):
            asyncio.run(loop.run(goal="again", tenant_id="t1", agent_id="trader", as_of=AS_OF, run_id="r1"))
        assert loop.planner.calls == calls  # type: ignore[attr-defined]
        assert Checkpoint.objects.count() == checkpoints
        assert list(audit_log().events("t1")) == events
    finally:
        connections["default"].close()
        ledger.close()


def test_a_commit_in_a_message_never_commits_what_django_would_roll_back():
    """After an inner ``atomic(savepoint=False)`` failed, a query asked to commit with its
    answer leaves the commit to Django, which rolls the group's sent write back."""
    require_postgres("only PostgreSQL's group commits in a message")
    tenant = Tenant.objects.create(slug="fused", name="Fused")
    group = commit_group()
    with group.write():
        group.send('UPDATE "tenants_tenant" SET "name" = %s WHERE "id" = %s', ["changed", tenant.pk])
        try:
            with transaction.atomic(savepoint=False):
                raise ValueError("a caller's inner block fails and is caught")
        except ValueError:
            pass
        assert connection.needs_rollback
        group.query("SELECT 1", [], commit=True)
    assert Tenant.objects.get(pk=tenant.pk).name == "Fused"
