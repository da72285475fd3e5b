"""The inbox projection writes only what changed (a ``checkpoint_saved`` receiver).

What it writes is counted by the database itself (:func:`row_writes`, a trigger on the
table): the projection sends its statements unconditionally, and whether a row is
written is up to each statement's condition on the server.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection

from approvals.models import Approval, ApprovalStatus
from approvals.services import approval_decide
from tests.site.console.conftest import start_waiting

INBOX_TABLES = ("approvals_approval", "approvals_unknownoutcome")


@contextmanager
def messages() -> Iterator[list[str]]:
    """What the connection sends: the ORM's queries and the commit groups' messages, whose
    writes to the inbox join the checkpoint's (each message as its statements joined by "; ")."""
    sent: list[str] = []

    def record(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        sent.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        yield sent


@contextmanager
def row_writes(table: str = "approvals_approval") -> Iterator[list[str]]:
    """Every row the database inserts or updates in ``table`` within, as ``INSERT`` or
    ``UPDATE`` (read once the block ends), counted by a row trigger."""
    written: list[str] = []
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("CREATE TABLE test_row_writes (op text)")
            cursor.execute(
                "CREATE FUNCTION test_count_row_write() RETURNS trigger LANGUAGE plpgsql AS"
                " $$ BEGIN INSERT INTO test_row_writes VALUES (TG_OP); RETURN NULL; END $$"
            )
            cursor.execute(
                f"CREATE TRIGGER test_row_writes AFTER INSERT OR UPDATE ON {table}"
                " FOR EACH ROW EXECUTE FUNCTION test_count_row_write()"
            )
        else:
            cursor.execute("CREATE TEMP TABLE test_row_writes (op text)")
            for op in ("INSERT", "UPDATE"):
                cursor.execute(
                    f"CREATE TEMP TRIGGER test_row_{op.lower()} AFTER {op} ON {table}"
                    f" BEGIN INSERT INTO test_row_writes VALUES ('{op}'); END"
                )
    try:
        yield written
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT op FROM test_row_writes")
            written.extend(op for (op,) in cursor.fetchall())
            if connection.vendor == "postgresql":
                cursor.execute(f"DROP TRIGGER test_row_writes ON {table}")
                cursor.execute("DROP FUNCTION test_count_row_write()")
            else:
                cursor.execute("DROP TRIGGER test_row_insert")
                cursor.execute("DROP TRIGGER test_row_update")
            cursor.execute("DROP TABLE test_row_writes")


def writes(sent: list[str], table: str) -> list[str]:
    """The INSERT and UPDATE statements on ``table``, in messages of one or many statements."""
    pattern = re.compile(rf'(?:^|;)\s*((?:INSERT INTO|UPDATE)\s+"?{table}"?\s[^;]*)', re.IGNORECASE)
    return [m.group(1) for text in sent for m in pattern.finditer(text)]


def test_a_decision_writes_its_approval_row_once_and_no_other(people, brokerage_path):
    """Two approvals wait in one tenant; approving one updates that row once and leaves the other alone."""
    first = start_waiting(people["op"], "p1")
    second = start_waiting(people["op"], "p2")
    with messages() as sent:
        approval_decide(tenant_id="t1", approval_id=first.pk, user=people["op"], decision="approve")
    updates = writes(sent, "approvals_approval")
    assert len(updates) == 1 and not any(q.upper().startswith("INSERT") for q in updates)
    assert Approval.objects.get(pk=first.pk).status == ApprovalStatus.APPROVED
    assert Approval.objects.get(pk=second.pk).status == ApprovalStatus.PENDING


def _reads(sent: list[str]) -> list[str]:
    """The SELECTs from the approvals table among what was sent."""
    table = re.compile(r'(?:^|;)\s*SELECT\b[^;]*\bFROM\s+"?approvals_approval"?', re.IGNORECASE)
    return [m.group() for text in sent for m in table.finditer(text)]


def test_a_decision_reads_its_locked_approval_row_once(people, brokerage_path):
    """The service locks the row; the projection compares with it instead of reading it again."""
    waiting = start_waiting(people["op"], "p1")
    with messages() as sent:
        answer = approval_decide(
            tenant_id="t1", approval_id=waiting.pk, user=people["op"], decision="approve"
        )
    reads = _reads(sent)
    assert len(reads) == 1, reads
    stored = Approval.objects.get(pk=waiting.pk)
    assert (answer.status, answer.decided_by) == (stored.status, stored.decided_by)
    assert answer.votes == stored.votes


def test_a_save_without_approvals_or_unknown_outcomes_touches_no_inbox_table(people, brokerage_path):
    """A checkpoint whose actions need nobody costs the inbox no query; one that asks inserts one row."""
    from runs.engine.stores import DjangoCheckpointStore
    from runs.engine.worker import Worker
    from runs.models import Run
    from runs.services import run_start

    run_start(tenant_id="t1", agent="paper-trader", goal="buy 2 ACME", user=people["op"], run_id="p3")
    Worker(lease_seconds=30).run_once()
    store = DjangoCheckpointStore()
    history = store.history("t1", "p3")
    quiet = next(s for s in history if all(a.approval is None for a in s.actions) and s.actions)
    asking = history[-1]
    assert any(a.approval is not None for a in asking.actions)
    seq = Run.objects.get(run_id="p3").seq

    with messages() as sent:
        store.save(quiet.model_copy(update={"seq": seq + 1}))
    assert [text for text in sent if any(t in text for t in INBOX_TABLES)] == []

    Approval.objects.filter(run_id="p3").delete()
    with row_writes() as written:
        store.save(asking.model_copy(update={"seq": seq + 2}))
    assert written == ["INSERT"]
    assert Approval.objects.filter(run_id="p3", status=ApprovalStatus.PENDING).count() == 1

    with messages() as sent, row_writes() as written:  # the same again: nothing to write
        store.save(asking.model_copy(update={"seq": seq + 3}))
    assert written == []
    assert _reads(sent) == []


def test_saves_after_a_decision_do_not_rewrite_the_decided_row(people, brokerage_path):
    """Once approved, the run's later checkpoints (observe, verify, done) neither read nor write the row."""
    from runs.engine.stores import DjangoCheckpointStore
    from runs.engine.worker import Worker
    from runs.models import Run

    approval = start_waiting(people["op"], "p4")
    approval_decide(tenant_id="t1", approval_id=approval.pk, user=people["op"], decision="approve")
    Worker(lease_seconds=30).run_once()
    store = DjangoCheckpointStore()
    final = store.load("t1", "p4")
    assert final is not None and any(a.approval is not None and a.approval.granted for a in final.actions)
    with messages() as sent, row_writes() as written:
        store.save(final.model_copy(update={"seq": Run.objects.get(run_id="p4").seq + 1}))
    assert written == []
    assert _reads(sent) == []
    assert Approval.objects.get(pk=approval.pk).status == ApprovalStatus.APPROVED


def test_a_later_save_that_changes_an_approval_rewrites_that_row_only(people, brokerage_path):
    """A field that differs from the stored row (a note added to the checkpoint) is written; once."""
    from runs.engine.stores import DjangoCheckpointStore
    from runs.models import Run

    first = start_waiting(people["op"], "p5")
    second = start_waiting(people["op"], "p6")
    store = DjangoCheckpointStore()
    state = store.load("t1", "p5")
    assert state is not None
    actions = [
        a.model_copy(update={"approval": a.approval.model_copy(update={"note": "checked twice"})})
        if a.approval is not None
        else a
        for a in state.actions
    ]
    with row_writes() as written:
        store.save(state.model_copy(update={"seq": Run.objects.get(run_id="p5").seq + 1, "actions": actions}))
    assert written == ["UPDATE"]
    assert Approval.objects.get(pk=first.pk).note == "checked twice"
    assert Approval.objects.get(pk=second.pk).note == ""
    assert Approval.objects.get(pk=first.pk).status == ApprovalStatus.PENDING
