"""A decision is one transaction (``DjangoCommitGroup.transaction``): all of it lands, or none."""

from __future__ import annotations

import tempfile

import pytest
from django.db import connection

from approvals.models import Approval, ApprovalStatus
from approvals.services import approval_decide
from runs.engine.loops import commit_group
from runs.models import Checkpoint, Run, RunStatus
from tests.site._audit import logged
from tests.site.runs._batch import require_postgres

pytestmark = pytest.mark.django_db(transaction=True)


def _decided_kinds() -> list[str]:
    return list(
        logged()
        .filter(tenant_id="t1", kind__in=["approval.decided", "run.status"])
        .order_by("seq")
        .values_list("kind", flat=True)
    )


def test_an_approve_lands_whole_the_run_queued_its_row_and_both_events(waiting, people):
    before = Checkpoint.objects.filter(run_id="r1").count()
    events = _decided_kinds()
    answer = approval_decide(tenant_id="t1", approval_id=waiting.pk, user=people["op"], decision="approve")
    assert answer.status == ApprovalStatus.APPROVED
    assert Approval.objects.get(pk=waiting.pk).status == ApprovalStatus.APPROVED
    assert Run.objects.get(run_id="r1").status == RunStatus.QUEUED
    assert Checkpoint.objects.filter(run_id="r1").count() == before + 1
    assert _decided_kinds()[len(events) :] == ["approval.decided", "run.status"]


def test_a_failure_after_the_engine_saved_rolls_the_whole_decision_back(waiting, people, monkeypatch):
    """The run's move fails after the loop's own grouped block ended: its checkpoint, inbox
    row and audit event must not have committed on their own (the block's holds do not flush)."""
    import runs.services

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the database went away")

    monkeypatch.setattr(runs.services, "_announce_queued", broken)
    before = Checkpoint.objects.filter(run_id="r1").count()
    events = _decided_kinds()
    with pytest.raises(RuntimeError, match="went away"):
        approval_decide(tenant_id="t1", approval_id=waiting.pk, user=people["op"], decision="approve")
    assert Approval.objects.get(pk=waiting.pk).status == ApprovalStatus.PENDING
    assert Run.objects.get(run_id="r1").status == RunStatus.WAITING
    assert Checkpoint.objects.filter(run_id="r1").count() == before
    assert _decided_kinds() == events
    monkeypatch.undo()  # and the approval can still be decided
    approval_decide(tenant_id="t1", approval_id=waiting.pk, user=people["op"], decision="approve")
    assert Run.objects.get(run_id="r1").status == RunStatus.QUEUED


def test_an_approve_on_postgresql_is_four_round_trips_with_the_commit_in_the_last(waiting, people):
    """The BEGIN with the lock, the load, then the save, the inbox row, the decision's
    audit event and the run's move in one message, and the move's audit event with the
    COMMIT: four round trips (libpq's own trace), no savepoint, no commit of the engine's
    writes on their own."""
    require_postgres("SQLite runs each statement at once")
    sent: list[str] = []

    def record(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        sent.append(sql)
        return execute(sql, params, many, context)

    connection.ensure_connection()
    pg = connection.connection.pgconn
    with tempfile.TemporaryFile("w+") as trace, connection.execute_wrapper(record):
        pg.trace(trace.fileno())
        try:
            approval_decide(tenant_id="t1", approval_id=waiting.pk, user=people["op"], decision="approve")
        finally:
            pg.untrace()
        trace.seek(0)
        round_trips = sum(1 for line in trace if "\tB\t" in line and "\tReadyForQuery" in line)
    assert round_trips == 4, sent
    assert len(sent) == 4, sent
    assert sent[0].startswith("BEGIN; ") and "FOR UPDATE" in sent[0], sent[0]
    writes = sent[2]
    assert all(table in writes for table in ("runs_checkpoint", "approvals_approval", "runs_run")), writes
    assert not any("SAVEPOINT" in text for text in sent)
    assert sent[-1].rstrip().endswith("COMMIT") and "audit_pendingevent" in sent[-1]  # the event goes with it
    assert Run.objects.get(run_id="r1").status == RunStatus.QUEUED


def test_a_commit_group_transaction_cannot_start_inside_a_held_group():
    group = commit_group()
    group.hold()
    try:
        with pytest.raises(RuntimeError, match="held"), group.transaction():
            pass
    finally:
        group.release()


def test_the_locked_row_is_the_approval_the_orm_loads(waiting, people):
    """``_lock_with_role`` reads the row by hand (``sitekit.db.model_from_row``): every field
    is what the ORM gives, JSON, timestamps and booleans included, on either database."""
    from django.db.models import JSONField

    from approvals.services import _lock_with_role
    from tenants.models import Membership

    Approval.objects.filter(pk=waiting.pk).update(votes=[{"by": "x", "note": "é"}], high_impact=True)
    group = commit_group()
    with group.transaction():
        locked = _lock_with_role(group, "t1", waiting.pk, people["op"])
    assert locked is not None
    row, held = locked
    orm = Approval.objects.get(pk=waiting.pk)
    fields = Approval._meta.concrete_fields
    assert [getattr(row, f.attname) for f in fields] == [getattr(orm, f.attname) for f in fields]
    assert any(isinstance(f, JSONField) for f in fields) and row.votes == [{"by": "x", "note": "é"}]
    assert row.high_impact is True and row.requested_at.tzinfo is not None
    role = Membership.objects.get(user=people["op"], tenant__slug="t1").role
    assert held == role and not row._state.adding
    with group.transaction():
        assert _lock_with_role(group, "t2", waiting.pk, people["op"]) is None  # another tenant's id
