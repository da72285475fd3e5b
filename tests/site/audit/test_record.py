"""DjangoAuditLog.record: events linked by PostgreSQL inside a grouped transaction, same chain."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, connections

from audit.models import AuditEvent as EventRow
from audit.store import DjangoAuditLog
from audit.wiring import audit_log
from keelgate.audit import verify
from runs.engine.loops import commit_group
from sitekit.commits import DjangoCommitGroup

pytestmark = pytest.mark.django_db(transaction=True)

ODD = {"text": 'buy 100% of \'ACME\'; -- %s %(x)s \\ " ,"seq":0,', "ü": "€ 😀"}


def _grouped_log() -> tuple[DjangoAuditLog, DjangoCommitGroup]:
    group = commit_group()
    return audit_log(group=group), group


def test_recorded_events_chain_on_with_appends_and_verify():
    """A new tenant's first events, recorded and then appended in one transaction: 1, 2, 3, one chain."""
    log, group = _grouped_log()
    group.hold()
    try:
        log.record("t1", actor="agent:a", kind="one", body={"n": 1})
        log.record("t1", actor="agent:a", kind="two", body=ODD)
        third = log.append("t1", actor="bob", kind="three", body={})  # reads the head the server moved
    finally:
        group.release()
    rows = list(
        EventRow.objects.filter(tenant_id="t1").order_by("seq").values_list("seq", "kind", "prev_hash")
    )
    assert [(seq, kind) for seq, kind, _ in rows] == [(1, "one"), (2, "two"), (3, "three")]
    assert third.seq == 3
    assert verify(log, "t1").ok
    assert log.head("t1").body == {}  # type: ignore[union-attr]
    assert [e.body for e in log.events("t1")][1] == ODD


def test_a_recorded_event_follows_an_existing_chain_in_its_own_transaction():
    """Outside a held stretch, record joins a chain that appends started, one commit per event."""
    log, _ = _grouped_log()
    log.append("t1", actor="a", kind="first", body={})
    log.record("t1", actor="a", kind="second", body={"x": [1, 2]})
    log.record("t1", actor="a", kind="third", body={})
    assert [e.seq for e in log.events("t1")] == [1, 2, 3]
    assert verify(log, "t1").ok


def test_a_failed_transaction_records_nothing():
    """Recorded events roll back with their transaction; the next ones take the numbers."""
    log, group = _grouped_log()
    group.hold()
    log.record("t1", actor="a", kind="lost", body={})
    group.discard()
    log.record("t1", actor="a", kind="kept", body={})
    assert [(e.seq, e.kind) for e in log.events("t1")] == [(1, "kept")]
    assert verify(log, "t1").ok


def test_threads_recording_at_once_never_fork_the_chain():
    """Four threads, each its own connection, record 40 events in grouped pairs: 1..160, no gap, verified."""
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
    log = audit_log()
    assert [e.seq for e in log.events("race")] == list(range(1, 161))
    assert verify(log, "race").ok
    if connection.vendor == "postgresql":
        # each pair shares its transaction: the second event links to the first in the same commit
        pairs = list(
            EventRow.objects.filter(tenant_id="race").order_by("seq").values_list("actor", flat=True)
        )
        assert all(pairs[i] == pairs[i + 1] for i in range(0, 160, 2))


def test_an_append_outside_a_group_is_one_statement_on_postgresql():
    """The server links an ungrouped append (run moves, decisions): one statement, no savepoint.

    A tenant's first event makes its head row first; every later one is one round trip,
    and the event it answers with is the stored one, hash and all.
    """
    from django.db import transaction
    from django.test.utils import CaptureQueriesContext

    log = audit_log()
    if connection.vendor != "postgresql":
        pytest.skip("SQLite appends in-process: no round trips to save")
    log.append("t1", actor="a", kind="first", body={})  # the head row is made once
    with transaction.atomic(), CaptureQueriesContext(connection) as captured:
        second = log.append("t1", actor="a", kind="second", body=ODD)
    statements = [q["sql"] for q in captured.captured_queries if q["sql"] not in ("BEGIN", "COMMIT")]
    assert len(statements) == 1, statements
    stored = log.head("t1")
    assert stored is not None and (stored.seq, stored.hash, stored.prev_hash) == (
        second.seq,
        second.hash,
        second.prev_hash,
    )
    assert second.seq == 2 and verify(log, "t1").ok
