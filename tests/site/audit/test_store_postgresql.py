"""The PostgreSQL log's hand-written insert (``audit.store_postgresql.INSERT_PENDING``)
stores exactly the row the ORM store writes, so sequencing gives it the engine's leaf.

These properties hold the two together on arbitrary events: text with quotes, percent
signs, backslashes and any Unicode the database stores, times at any microsecond.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from audit.models import AuditEvent as EventRow
from audit.models import PendingEvent
from audit.store import pending_event
from audit.store_postgresql import PostgresAuditLog
from audit.tree import event_leaf
from audit.verification import verify_log
from audit.wiring import integrate_pending
from keelgate.audit import object_leaf_hash
from keelgate.testing import FrozenClock
from runs.engine.loops import commit_group
from tests.site.runs._batch import require_postgres

pytestmark = pytest.mark.django_db

_CHARACTERS = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
"""Any character PostgreSQL stores in text: no NUL, no lone surrogate (not UTF-8)."""
_TEXT = st.text(_CHARACTERS, max_size=40)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=8,
)
_EVENT = {
    "actor": st.text(_CHARACTERS, max_size=60),
    "kind": st.text(_CHARACTERS, min_size=1, max_size=20),
    "body": st.dictionaries(_TEXT, _JSON, max_size=4),
    "at": st.datetimes(
        min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
    ),
}
_SETTINGS = settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.fixture(autouse=True)
def _postgres_only() -> None:
    require_postgres("the statement is PostgreSQL's")


def _sequenced(tenant_id: str) -> list[EventRow]:
    integrate_pending([tenant_id])
    return list(EventRow.objects.filter(tenant_id=tenant_id).order_by("seq"))


def _same_as_the_orm_writes(row: EventRow, at: datetime, actor: str, kind: str, body: dict) -> None:
    expected = pending_event(row.tenant_id, at, actor, kind, body)
    for column, value in expected.items():
        assert getattr(row, column) == value, column
    assert row.leaf_hash == object_leaf_hash(event_leaf(row)).hex()


@_SETTINGS
@given(**_EVENT)
def test_an_event_inserted_by_the_statement_is_the_orms_row(actor, kind, body, at):
    """Recorded outside a group (one INSERT in the caller's transaction), then sequenced:
    the row is the one the ORM store writes, its leaf hash the engine's, the log verifies."""
    tenant_id = uuid.uuid4().hex
    log = PostgresAuditLog(clock=FrozenClock(at))
    log.record(tenant_id, actor="setup", kind="first", body={})
    log.record(tenant_id, actor=actor, kind=kind, body=body)
    assert PendingEvent.objects.filter(tenant_id=tenant_id).count() == 2
    first, second = _sequenced(tenant_id)
    assert (first.seq, second.seq) == (1, 2)
    _same_as_the_orm_writes(second, at, actor, kind, body)
    assert verify_log(tenant_id=tenant_id).ok


@_SETTINGS
@given(**_EVENT)
def test_an_event_recorded_in_a_group_is_the_orms_row(actor, kind, body, at):
    """Recorded in a held group (the INSERT sent unanswered), then appended after it: both
    numbered in insertion order, the append's answer the row as stored."""
    tenant_id = uuid.uuid4().hex
    group = commit_group()
    log = PostgresAuditLog(clock=FrozenClock(at), group=group)
    group.hold()
    try:
        log.record(tenant_id, actor=actor, kind=kind, body=body)
        appended = log.append(tenant_id, actor=actor, kind=kind, body=body)
    finally:
        group.release()
    first, second = _sequenced(tenant_id)
    assert appended.seq == 2 == second.seq and appended.hash == second.leaf_hash
    _same_as_the_orm_writes(first, at, actor, kind, body)
    assert verify_log(tenant_id=tenant_id).ok
