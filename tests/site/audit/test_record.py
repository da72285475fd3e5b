"""DjangoAuditLog.record inside commit groups: events numbered in order, rolled back with
their transaction, gapless under concurrent writers, and the log verifies.

On SQLite (the ORM store) an event is numbered in its writer's transaction; on
PostgreSQL ``record`` only inserts, and the next append, reader or sequencer numbers it.
"""

from __future__ import annotations

import tempfile
import threading
from typing import Any

import pytest
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext

from audit import tree as audit_tree
from audit.models import AuditEvent as EventRow
from audit.models import ChainHead, TreeNode
from audit.store import DjangoAuditLog
from audit.store_postgresql import INSERT_PENDING
from audit.verification import verify_log
from audit.wiring import audit_log, integrate_pending
from runs.engine.loops import commit_group
from sitekit.commits import DjangoCommitGroup
from tests.site.audit.test_tamper_sql import events_root

pytestmark = pytest.mark.django_db(transaction=True)

ODD = {"text": 'buy 100% of \'ACME\'; -- %s %(x)s \\ " ,"seq":0,', "ü": "€ 😀"}


def _grouped_log() -> tuple[DjangoAuditLog, DjangoCommitGroup]:
    group = commit_group()
    return audit_log(group=group), group


def _verified(tenant_id: str, size: int) -> None:
    """The tenant's log verifies, ``size`` events, to the root of its events' own fields."""
    report = verify_log(tenant_id=tenant_id)
    assert (report.ok, report.checked, report.head_seq) == (True, size, size), report
    assert report.head_hash == events_root(tenant_id)


def test_recorded_events_are_numbered_in_order_with_appends():
    """A new tenant's first events, recorded and then appended in one transaction: 1, 2, 3, in
    the order written, and the append answers with its number."""
    log, group = _grouped_log()
    group.hold()
    try:
        log.record("t1", actor="agent:a", kind="one", body={"n": 1})
        log.record("t1", actor="agent:a", kind="two", body=ODD)
        third = log.append("t1", actor="bob", kind="three", body={})  # numbers what waits before it
    finally:
        group.release()
    rows = list(EventRow.objects.filter(tenant_id="t1").order_by("seq").values_list("seq", "kind", "version"))
    assert rows == [(1, "one", 2), (2, "two", 2), (3, "three", 2)]
    assert third.seq == 3
    _verified("t1", 3)
    assert log.head("t1").body == {}  # type: ignore[union-attr]
    assert [e.body for e in log.events("t1")][1] == ODD


def test_on_sqlite_an_event_is_numbered_in_its_writers_transaction():
    """Inside the held transaction a recorded event already has its number, leaf and the
    head moved; on PostgreSQL it waits unnumbered until someone sequences it."""
    log, group = _grouped_log()
    group.hold()
    try:
        log.record("t1", actor="a", kind="first", body={})
        numbered = EventRow.objects.filter(tenant_id="t1", seq__isnull=False)
        if connection.vendor == "sqlite":
            assert list(numbered.values_list("seq", "kind")) == [(1, "first")]
            assert numbered.get().leaf_hash
            assert ChainHead.objects.get(tenant_id="t1").seq == 1
        else:
            assert not numbered.exists()
    finally:
        group.release()
    integrate_pending(["t1"])
    _verified("t1", 1)


def test_a_recorded_event_follows_an_existing_log_in_its_own_transaction():
    """Outside a held stretch, record joins a log that appends started, one commit per event."""
    log, _ = _grouped_log()
    log.append("t1", actor="a", kind="first", body={})
    log.record("t1", actor="a", kind="second", body={"x": [1, 2]})
    log.record("t1", actor="a", kind="third", body={})
    integrate_pending(["t1"])
    assert [(e.seq, e.kind) for e in log.events("t1")] == [(1, "first"), (2, "second"), (3, "third")]
    _verified("t1", 3)


def test_a_failed_transaction_records_nothing():
    """Recorded events roll back with their transaction, leaving no row, no tree node, the
    head unmoved; the next ones take the numbers."""
    log, group = _grouped_log()
    log.append("t1", actor="a", kind="first", body={})
    nodes = TreeNode.objects.filter(tenant_id="t1").count()
    group.hold()
    log.record("t1", actor="a", kind="lost", body={})
    log.record("t1", actor="a", kind="lost", body={})
    group.discard()
    assert not EventRow.objects.filter(kind="lost").exists()
    assert ChainHead.objects.get(tenant_id="t1").seq == 1
    assert TreeNode.objects.filter(tenant_id="t1").count() == nodes
    log.record("t1", actor="a", kind="kept", body={})
    integrate_pending(["t1"])
    assert [(e.seq, e.kind) for e in log.events("t1")] == [(1, "first"), (2, "kept")]
    _verified("t1", 2)


def test_threads_recording_at_once_get_gapless_numbers():
    """Four threads, each its own connection, record 40 events in grouped pairs: 1..160, no gap,
    none lost, each thread's events in its order, and the log verifies. On SQLite, where an
    event is numbered in its writer's transaction, each pair is numbered together."""
    errors: list[BaseException] = []

    def work(worker: int) -> None:
        log, group = _grouped_log()
        try:
            for n in range(20):
                group.hold()
                try:
                    log.record("race", actor=f"w{worker}", kind="note", body={"n": n, "i": 0})
                    log.record("race", actor=f"w{worker}", kind="note", body={"n": n, "i": 1})
                finally:
                    group.release()
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    _verified("race", 160)
    rows = list(EventRow.objects.filter(tenant_id="race").order_by("seq").values_list("seq", "actor", "body"))
    assert [seq for seq, _, _ in rows] == list(range(1, 161))
    for w in range(4):
        mine = [body for _, actor, body in rows if actor == f"w{w}"]
        assert mine == [f'{{"i":{i},"n":{n}}}' for n in range(20) for i in (0, 1)]
    if connection.vendor == "sqlite":
        actors = [actor for _, actor, _ in rows]
        assert all(actors[i] == actors[i + 1] for i in range(0, 160, 2))


def test_a_record_outside_a_group_is_one_statement_on_postgresql():
    """On PostgreSQL an ungrouped record (run moves, decisions) is one INSERT and takes no lock:
    the event waits unnumbered, and is numbered after the others once sequenced."""
    if connection.vendor != "postgresql":
        pytest.skip("SQLite numbers each event in its writer's transaction")
    log = audit_log()
    log.append("t1", actor="a", kind="first", body={})
    with transaction.atomic(), CaptureQueriesContext(connection) as captured:
        log.record("t1", actor="a", kind="second", body=ODD)
    statements = [q["sql"] for q in captured.captured_queries if q["sql"] not in ("BEGIN", "COMMIT")]
    assert len(statements) == 1, statements
    assert statements[0].startswith(INSERT_PENDING.split(" VALUES")[0])
    assert not EventRow.objects.filter(tenant_id="t1", kind="second", seq__isnull=False).exists()
    assert ChainHead.objects.get(tenant_id="t1").seq == 1
    assert integrate_pending(["t1"]) == 1
    stored = log.head("t1")
    assert stored is not None and (stored.seq, stored.body) == (2, ODD)
    _verified("t1", 2)


def test_a_record_without_a_transaction_is_one_autocommit_statement_on_postgresql():
    """On PostgreSQL a record with no transaction to join is one INSERT in one round trip,
    committed on its own (libpq's trace: one message answered, the session idle after it),
    and it sends no NOTIFY, which would make PostgreSQL commit such appends one at a time."""
    if connection.vendor != "postgresql":
        pytest.skip("SQLite numbers each event in its writer's transaction")
    log = audit_log()
    log.record("t1", actor="a", kind="first", body={})  # the connection is open before the trace
    sent: list[str] = []

    def capture(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        sent.append(sql)
        return execute(sql, params, many, context)

    pg = connection.connection.pgconn
    with tempfile.TemporaryFile("w+") as trace, connection.execute_wrapper(capture):
        pg.trace(trace.fileno())
        try:
            log.record("t1", actor="a", kind="second", body=ODD)
        finally:
            pg.untrace()
        trace.seek(0)
        ready = [line for line in trace if "\tB\t" in line and "\tReadyForQuery" in line]
    assert sent == [INSERT_PENDING] and "notify" not in INSERT_PENDING.lower()
    assert len(ready) == 1 and ready[0].rstrip().endswith("I"), ready  # idle: committed, no transaction
    assert integrate_pending(["t1"]) == 2
    stored = log.head("t1")
    assert stored is not None and (stored.seq, stored.kind, stored.body) == (2, "second", ODD)
    _verified("t1", 2)


def test_an_event_committed_while_a_batch_is_sequenced_is_not_lost(monkeypatch: pytest.MonkeyPatch):
    """PostgreSQL: an event inserted before a batch is read but committed while that batch is
    being sequenced (its number in the queue below the batch's last) is numbered by the next
    pass, never dropped from the queue unnumbered."""
    if connection.vendor != "postgresql":
        pytest.skip("SQLite writers are serialised: no insert commits during a sequencing")
    inserted, commit_now, committed = threading.Event(), threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def early_writer() -> None:
        try:
            with transaction.atomic():
                audit_log().record("t1", actor="a", kind="early", body={})  # queued first, not committed
                inserted.set()
                assert commit_now.wait(30)
            committed.set()
        except BaseException as exc:  # reported below
            errors.append(exc)
            committed.set()
        finally:
            connections.close_all()

    real_new_nodes = audit_tree.new_nodes

    def new_nodes_once_the_early_event_commits(*args: Any, **kwargs: Any) -> Any:
        commit_now.set()  # the batch has been read: let the early writer commit now
        assert committed.wait(30)
        return real_new_nodes(*args, **kwargs)

    writer = threading.Thread(target=early_writer)
    writer.start()
    assert inserted.wait(30)
    audit_log().record("t1", actor="a", kind="late", body={})  # queued second, committed
    monkeypatch.setattr(audit_tree, "new_nodes", new_nodes_once_the_early_event_commits)
    integrate_pending(["t1"])
    monkeypatch.setattr(audit_tree, "new_nodes", real_new_nodes)
    assert committed.is_set()  # the early event did commit in the middle of that pass
    writer.join(timeout=60)
    assert not errors, errors
    integrate_pending(["t1"])
    kinds = list(EventRow.objects.filter(tenant_id="t1").order_by("seq").values_list("kind", flat=True))
    assert kinds == ["late", "early"]
    _verified("t1", 2)
