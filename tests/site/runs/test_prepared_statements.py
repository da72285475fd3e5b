"""A commit group's statements are prepared once per server session (sitekit.postgresql.commits).

psycopg prepares them (``prepare=True``) in the pipeline that first uses them and executes
them by name after; the server's ``pg_prepared_statements`` says what a session holds,
and libpq's trace what each message carries (``Parse`` with a name: a preparation).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

import pytest
from django.db import DatabaseError, connection

from audit.selectors import audit_verify
from keelgate.errors import LeaseLostError
from keelgate.loop import LoopState
from runs.engine.fencing import Fence
from runs.engine.loops import commit_group, database_stores
from runs.models import Checkpoint, Run, RunStatus
from tests.site.runs._batch import require_postgres

pytestmark = pytest.mark.django_db(transaction=True)

AS_OF = datetime(2026, 11, 1, 9, 30, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _fresh_session() -> Iterator[None]:
    """A new server session: nothing prepared there, nothing remembered of it here."""
    require_postgres("prepared statements are PostgreSQL's")
    connection.close()
    yield
    connection.close()


def _run(run_id: str, epoch: int = 1) -> None:
    Run.objects.create(
        tenant_id="t1",
        run_id=run_id,
        agent="trader",
        goal="buy",
        as_of=AS_OF,
        status=RunStatus.RUNNING,
        lease_epoch=epoch,
    )


def _state(run_id: str, seq: int) -> LoopState:
    return LoopState(
        tenant_id="t1", run_id=run_id, agent_id="trader", goal="buy", as_of=AS_OF, seq=seq, trace_id="tr"
    )


@contextmanager
def _messages() -> Iterator[list[str]]:
    """Every message the connection sends meanwhile (a commit group's: its statements joined)."""
    sent: list[str] = []

    def record(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        sent.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        yield sent


@contextmanager
def _preparations() -> Iterator[list[str]]:
    """The names of the statements prepared on the wire meanwhile (libpq's trace: a
    ``Parse`` message with a statement name), read when the block ends."""
    connection.ensure_connection()
    pg = connection.connection.pgconn
    names: list[str] = []
    with tempfile.TemporaryFile("w+") as trace:
        pg.trace(trace.fileno())
        try:
            yield names
        finally:
            pg.untrace()
        trace.seek(0)
        for line in trace:
            fields = line.split("\t")
            if len(fields) > 4 and fields[1] == "F" and fields[3] == "Parse":
                name = fields[4].strip().split('"')[1]  # "name" "query" ...; unnamed: ""
                if name:
                    names.append(name)


def _save_and_record(run_id: str, seq: int, epoch: int = 1) -> None:
    """What a worker's step does in one transaction: a fenced save and a loop audit event."""
    checkpoints, _, audit = database_stores(Fence("t1", run_id, epoch))
    group = checkpoints.commit_group
    group.hold()
    try:
        checkpoints.save(_state(run_id, seq))
        audit.record("t1", actor="agent:trader", kind="loop.planned", body={"seq": seq})
    finally:
        group.release()


def _prepared_here() -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM pg_prepared_statements")
        return {name for (name,) in cursor.fetchall()}


def test_each_statement_is_prepared_with_its_first_use_and_executed_by_name_after():
    """The first transaction's message prepares its statements; the next ones only execute them."""
    _run("r1")
    _run("r2")
    with _preparations() as first:
        _save_and_record("r1", 1)
    with _preparations() as later:
        _save_and_record("r1", 2)
        _save_and_record("r2", 1)
    prepared = _prepared_here()
    assert len(prepared) >= 3  # the fence, the save, the audit link (and the head's insert)
    assert sorted(first) == sorted(prepared)
    assert later == []
    assert sorted(Checkpoint.objects.values_list("run_id", "seq")) == [("r1", 1), ("r1", 2), ("r2", 1)]
    assert audit_verify(tenant_id="t1").ok


def test_a_new_connection_prepares_again():
    """Prepared statements belong to a server session: a reconnect starts from none."""
    _run("r1")
    _save_and_record("r1", 1)
    connection.close()
    with _preparations() as prepared:
        _save_and_record("r1", 2)
    assert prepared
    assert Run.objects.get(run_id="r1").seq == 2


def test_with_prepare_off_statements_go_unprepared(settings):
    """KEELGATE_DB_PREPARE=0 (a pooler sharing sessions): nothing is prepared, the step is the same."""
    settings.KEELGATE_DB_PREPARE = False
    _run("r1")
    with _preparations() as prepared, _messages() as sent:
        _save_and_record("r1", 1)
        _save_and_record("r1", 2)
    assert prepared == []
    assert sent and not any("PREPARE" in message or "EXECUTE" in message for message in sent)
    assert _prepared_here() == set()
    assert Run.objects.get(run_id="r1").seq == 2


def test_a_refused_transaction_leaves_the_connection_able_to_prepare():
    """A lost lease refuses the message that prepared the statements; the next message prepares
    them again within itself (psycopg forgets what a failed pipeline prepared), then none does."""
    _run("r1", epoch=2)
    with pytest.raises(LeaseLostError):
        _save_and_record("r1", 1, epoch=1)  # prepared, then the fence refuses
    assert not Checkpoint.objects.exists()
    with _messages() as sent:
        _save_and_record("r1", 1, epoch=2)  # psycopg prepares again what the failed pipeline did
    assert len(sent) == 1  # in the same single message: no round trip more
    with _preparations() as prepared:
        _save_and_record("r1", 2, epoch=2)
    assert prepared == []
    assert Run.objects.get(run_id="r1").seq == 2


def test_a_failed_prepare_leaves_the_connection_able_to_prepare_again():
    """A statement that fails to prepare leaves those after it unprepared: the next message starts over."""
    group = commit_group()
    group.hold()
    with pytest.raises(DatabaseError):
        try:
            with group.write():
                group.send("SELECT missing FROM no_such_table WHERE id = %s", [1])
                group.send("SELECT %s::int + 1", [1])  # prepared after the failing one: never
        finally:
            group.release()
    group.hold()
    try:
        with group.write():
            assert group.query("SELECT %s::int + 1", [41]).rows == [(42,)]
    finally:
        group.release()


def test_writes_parked_at_a_barrier_are_prepared_on_the_connection_they_leave_on():
    """Written while one session was open, sent after a reconnect: the new session prepares them."""
    _run("r1")
    checkpoints, _, _ = database_stores(Fence("t1", "r1", 1))
    group = checkpoints.commit_group
    _save_and_record("r1", 1)  # this session prepares the save
    group.hold()
    try:
        checkpoints.save(_state("r1", 2))
        group.barrier()  # parked: waiting with its parameters, nothing sent
        connection.close()  # outside code, or a health check, closed it meanwhile
        with _preparations() as prepared:
            group.flush()
    finally:
        group.release()
    assert prepared
    assert Run.objects.get(run_id="r1").seq == 2


def test_a_load_outside_any_transaction_goes_prepared_too():
    """The store's read of a run's checkpoints: prepared with its first use, in autocommit."""
    _run("r1")
    _save_and_record("r1", 1)
    checkpoints, _, _ = database_stores(Fence("t1", "r1", 1))
    with _messages() as first, _preparations() as prepared:
        loaded = checkpoints.load("t1", "r1")
    with _messages() as second, _preparations() as again_prepared:
        again = checkpoints.load("t1", "r1")
    assert loaded is not None and again is not None and loaded.seq == again.seq == 1
    assert not connection.in_atomic_block
    assert len(first) == 1 and len(prepared) == 1
    assert len(second) == 1 and again_prepared == []
