"""Tampering with the audit tables in raw SQL is caught by ``verify_audit`` at the right seq.

Each case edits the database behind the store's back, the way someone with database
access would, then checks that the command fails and names the first bad event,
while an untouched tenant still verifies.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from audit.models import AuditEvent as EventRow
from audit.models import ChainHead
from audit.selectors import audit_verify
from audit.wiring import audit_log
from keelgate.audit import AuditEvent

pytestmark = pytest.mark.django_db

TENANT = "acme"
OTHER = "globex"
EVENTS = 5
EVENTS_TABLE = EventRow._meta.db_table
HEAD_TABLE = ChainHead._meta.db_table


def sql(statement: str, params: list[Any] | None = None) -> None:
    """Run one statement on the test database, table names filled in."""
    with connection.cursor() as cursor:
        cursor.execute(statement.format(events=EVENTS_TABLE, head=HEAD_TABLE), params or [])


def row(seq: int, tenant_id: str = TENANT) -> EventRow:
    """The stored row ``seq`` of a tenant."""
    return EventRow.objects.get(tenant_id=tenant_id, seq=seq)


def run_verify(*args: str) -> tuple[str, str | None]:
    """``verify_audit``'s stdout and its CommandError message (None when it passed)."""
    out = StringIO()
    try:
        call_command("verify_audit", *args, stdout=out)
    except CommandError as exc:
        return out.getvalue(), str(exc)
    return out.getvalue(), None


def forged(seq: int, prev_hash: str, *, actor: str = "mallory") -> AuditEvent:
    """A correctly hashed event a forger could build with the public algorithm."""
    at = datetime.fromisoformat(row(1).at)
    return AuditEvent.build(TENANT, seq, at, actor, "note", {"forged": True}, prev_hash)


def insert(event: AuditEvent, *, hash_: str | None = None) -> None:
    """Insert ``event`` as a raw row, optionally with a different stored hash."""
    sql(
        "INSERT INTO {events} (tenant_id, seq, at, actor, kind, body, prev_hash, hash)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
        [
            event.tenant_id,
            event.seq,
            event.at.isoformat(timespec="microseconds"),
            event.actor,
            event.kind,
            json.dumps(event.body, sort_keys=True, separators=(",", ":")),
            event.prev_hash,
            hash_ or event.hash,
        ],
    )


def update_body() -> None:
    sql("UPDATE {events} SET body = %s WHERE tenant_id = %s AND seq = 3", ['{"n":999}', TENANT])


def update_body_to_garbage() -> None:
    sql("UPDATE {events} SET body = %s WHERE tenant_id = %s AND seq = 3", ["{not json", TENANT])


def update_actor() -> None:
    sql("UPDATE {events} SET actor = %s WHERE tenant_id = %s AND seq = 2", ["someone-else", TENANT])


def update_kind() -> None:
    sql("UPDATE {events} SET kind = %s WHERE tenant_id = %s AND seq = 4", ["approved", TENANT])


def update_time() -> None:
    sql("UPDATE {events} SET at = %s WHERE tenant_id = %s AND seq = 3", ["2020-01-01T00:00:00+00:00", TENANT])


def update_time_naive() -> None:
    naive = row(3).at.rsplit("+", 1)[0]
    sql("UPDATE {events} SET at = %s WHERE tenant_id = %s AND seq = 3", [naive, TENANT])


def update_hash() -> None:
    sql("UPDATE {events} SET hash = %s WHERE tenant_id = %s AND seq = 4", ["f" * 64, TENANT])


def update_prev_hash() -> None:
    sql("UPDATE {events} SET prev_hash = %s WHERE tenant_id = %s AND seq = 3", ["e" * 64, TENANT])


def delete_middle() -> None:
    sql("DELETE FROM {events} WHERE tenant_id = %s AND seq = 3", [TENANT])


def delete_first() -> None:
    sql("DELETE FROM {events} WHERE tenant_id = %s AND seq = 1", [TENANT])


def delete_last() -> None:
    sql("DELETE FROM {events} WHERE tenant_id = %s AND seq = %s", [TENANT, EVENTS])


def delete_head_row() -> None:
    sql("DELETE FROM {head} WHERE tenant_id = %s", [TENANT])


def update_head_hash() -> None:
    sql("UPDATE {head} SET hash = %s WHERE tenant_id = %s", ["a" * 64, TENANT])


def insert_forged_bad_hash() -> None:
    insert(forged(EVENTS + 1, row(EVENTS).hash), hash_="b" * 64)


def insert_forged_linked() -> None:
    insert(forged(EVENTS + 1, row(EVENTS).hash))


def insert_forged_linked_with_head() -> None:
    event = forged(EVENTS + 1, row(EVENTS).hash)
    insert(event)
    sql("UPDATE {head} SET seq = %s, hash = %s WHERE tenant_id = %s", [event.seq, event.hash, TENANT])


def swap_seqs() -> None:
    sql("UPDATE {events} SET seq = -1 WHERE tenant_id = %s AND seq = 2", [TENANT])
    sql("UPDATE {events} SET seq = 2 WHERE tenant_id = %s AND seq = 4", [TENANT])
    sql("UPDATE {events} SET seq = 4 WHERE tenant_id = %s AND seq = -1", [TENANT])


def renumber() -> None:
    sql("UPDATE {events} SET seq = 50 WHERE tenant_id = %s AND seq = 3", [TENANT])


def move_to_other_tenant() -> None:
    sql("UPDATE {events} SET tenant_id = %s WHERE tenant_id = %s AND seq = 3", ["zz-ghost", TENANT])


def rewrite_tail_keeping_head() -> None:
    prev = row(2).hash
    for seq in range(3, EVENTS + 1):
        event = forged(seq, prev)
        sql(
            "UPDATE {events} SET at = %s, actor = %s, kind = %s, body = %s, prev_hash = %s, hash = %s"
            " WHERE tenant_id = %s AND seq = %s",
            [
                event.at.isoformat(timespec="microseconds"),
                event.actor,
                event.kind,
                json.dumps(event.body, sort_keys=True, separators=(",", ":")),
                event.prev_hash,
                event.hash,
                TENANT,
                seq,
            ],
        )
        prev = event.hash


CASES: list[tuple[str, Callable[[], None], int, str]] = [
    ("update body", update_body, 3, "hash_mismatch"),
    ("update body to invalid JSON", update_body_to_garbage, 3, "hash_mismatch"),
    ("update actor", update_actor, 2, "hash_mismatch"),
    ("update kind", update_kind, 4, "hash_mismatch"),
    ("update time", update_time, 3, "hash_mismatch"),
    ("strip the time zone", update_time_naive, 3, "hash_mismatch"),
    ("update hash", update_hash, 4, "hash_mismatch"),
    ("update prev_hash", update_prev_hash, 3, "prev_hash_mismatch"),
    ("delete a middle row", delete_middle, 3, "sequence_gap"),
    ("delete the first row", delete_first, 1, "sequence_gap"),
    ("delete the last row", delete_last, EVENTS, "head_mismatch"),
    ("delete the head row", delete_head_row, 1, "head_mismatch"),
    ("edit the head row", update_head_hash, EVENTS, "head_mismatch"),
    ("insert a forged row with a bad hash", insert_forged_bad_hash, EVENTS + 1, "hash_mismatch"),
    ("insert a well-linked forged row", insert_forged_linked, EVENTS + 1, "head_mismatch"),
    ("swap two rows' seq", swap_seqs, 2, "prev_hash_mismatch"),
    ("renumber a row", renumber, 3, "sequence_gap"),
    ("move a row to another tenant", move_to_other_tenant, 3, "sequence_gap"),
    ("rewrite the tail, head row stale", rewrite_tail_keeping_head, EVENTS, "head_mismatch"),
]


@pytest.fixture
def chains() -> None:
    """Two tenants with ``EVENTS`` events each, appended through the real store."""
    log = audit_log()
    for n in range(EVENTS):
        log.append(TENANT, actor="agent", kind="note", body={"n": n})
        log.append(OTHER, actor="agent", kind="note", body={"n": n})


def test_untouched_chains_verify(chains: None) -> None:
    """Before any tampering both tenants verify and the command succeeds."""
    out, error = run_verify()
    assert error is None
    assert f"tenant={TENANT} events={EVENTS} head={EVENTS} ok" in out
    assert f"tenant={OTHER} events={EVENTS} head={EVENTS} ok" in out


@pytest.mark.parametrize(("tamper", "bad_seq", "reason"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_tampering_is_found_at_first_bad_seq(
    chains: None, tamper: Callable[[], None], bad_seq: int, reason: str
) -> None:
    """After SQL tampering verify_audit fails naming the first bad seq; the other tenant stays ok."""
    tamper()
    out, error = run_verify()
    expected = f"tenant={TENANT} BROKEN at seq={bad_seq} reason={reason}"
    assert error is not None
    assert expected in error
    assert expected in out
    assert f"tenant={OTHER} events={EVENTS} head={EVENTS} ok" in out


def test_tampering_is_found_with_tenant_option(chains: None) -> None:
    """``--tenant`` verifies just that tenant and still fails on its tampered row."""
    update_actor()
    out, error = run_verify("--tenant", TENANT)
    assert error is not None and "seq=2 reason=hash_mismatch" in error
    assert OTHER not in out


def test_moved_row_breaks_the_tenant_it_lands_in(chains: None) -> None:
    """A row moved into a tenant without a chain makes that tenant's chain broken at seq 1."""
    move_to_other_tenant()
    out, _ = run_verify()
    assert "tenant=zz-ghost BROKEN at seq=1 reason=sequence_gap" in out


def test_rewrite_that_also_moves_the_head_row_needs_a_digest(chains: None) -> None:
    """A forged tail with the head row moved too verifies: only a signed digest catches it."""
    insert_forged_linked_with_head()
    report = audit_verify(tenant_id=TENANT)
    assert report.ok and report.head_seq == EVENTS + 1
