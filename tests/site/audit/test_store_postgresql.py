"""The server's link of an event (``audit.store_postgresql.LINK_HASH``) is the engine's hash.

The chain's hash has one definition, ``keelgate.audit.compute_hash`` over the canonical
bytes; the PostgreSQL audit log also lets the server compute it, from the bytes
``keelgate.audit.linked_parts`` puts around the number. These properties hold the two
together on arbitrary events: text with quotes, percent signs, backslashes and any
Unicode the database stores, times at any microsecond.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from audit.models import AuditEvent as EventRow
from audit.store_postgresql import PostgresAuditLog
from keelgate.audit import compute_hash, verify
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
    require_postgres("the server computes the hash on PostgreSQL only")


def _expected(tenant_id: str, seq: int) -> str:
    """The engine's hash of the stored row, from its own canonical bytes."""
    row = EventRow.objects.get(tenant_id=tenant_id, seq=seq)
    event = next(e for e in PostgresAuditLog().events(tenant_id, after_seq=seq - 1, limit=1))
    return compute_hash(row.prev_hash, event.canonical())


@_SETTINGS
@given(**_EVENT)
def test_an_event_linked_by_the_server_has_the_engines_hash(actor, kind, body, at):
    """An append outside a group is linked by one statement on the server; its hash is compute_hash's."""
    tenant_id = uuid.uuid4().hex
    log = PostgresAuditLog(clock=FrozenClock(at))
    log.append(tenant_id, actor="setup", kind="first", body={})
    event = log.append(tenant_id, actor=actor, kind=kind, body=body)
    assert event.seq == 2
    stored = EventRow.objects.get(tenant_id=tenant_id, seq=2)
    assert stored.hash == event.hash == _expected(tenant_id, 2)
    assert verify(log, tenant_id).ok


@_SETTINGS
@given(**_EVENT)
def test_an_event_recorded_in_a_group_has_the_engines_hash(actor, kind, body, at):
    """Recorded in a held group (the statement sent unanswered), then appended after it: one chain."""
    tenant_id = uuid.uuid4().hex
    group = commit_group()
    log = PostgresAuditLog(clock=FrozenClock(at), group=group)
    group.hold()
    try:
        log.record(tenant_id, actor=actor, kind=kind, body=body)
        log.append(tenant_id, actor=actor, kind=kind, body=body)
    finally:
        group.release()
    assert EventRow.objects.get(tenant_id=tenant_id, seq=1).hash == _expected(tenant_id, 1)
    assert verify(log, tenant_id).ok
