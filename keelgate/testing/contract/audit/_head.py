"""Contract of ``AuditLog.head``."""

from __future__ import annotations

from keelgate.audit import AuditLog
from keelgate.testing.contract.audit._base import (
    LogContractBase,
    LogFactory,
    append_many,
    new_tenant,
)

__all__ = ["HeadContract"]


class HeadContract(LogContractBase):
    """``head`` is the newest event of one tenant's log."""

    def test_head_of_an_empty_tenant_is_none(self, log: AuditLog, tenant: str) -> None:
        """A tenant that never appended has no head."""
        assert log.head(tenant) is None

    def test_head_is_the_last_appended_event(self, log: AuditLog, tenant: str) -> None:
        """After each append, head equals the event append returned."""
        for n in range(4):
            event = log.append(tenant, actor="a", kind="k", body={"n": n})
            assert log.head(tenant) == event

    def test_head_is_the_last_of_events(self, log: AuditLog, tenant: str) -> None:
        """head equals the last event events() yields."""
        append_many(log, tenant, 5)
        assert log.head(tenant) == list(log.events(tenant))[-1]

    def test_head_never_shows_another_tenant(self, log: AuditLog) -> None:
        """Each tenant's head is its own newest event, whatever the other appended last."""
        a, b, empty = new_tenant(), new_tenant(), new_tenant()
        append_many(log, a, 3)
        last_b = append_many(log, b, 2)[-1]
        head_a = log.head(a)
        assert head_a is not None
        assert (head_a.tenant_id, head_a.seq) == (a, 3)
        assert log.head(b) == last_b
        assert log.head(empty) is None

    def test_a_new_handle_sees_the_head_and_continues(self, make_log: LogFactory, tenant: str) -> None:
        """A reopened log has the same head and appends seq n+1 after it (durability)."""
        last = append_many(make_log(), tenant, 4)[-1]
        reopened = make_log()
        assert reopened.head(tenant) == last
        assert reopened.append(tenant, actor="a", kind="k", body={}).seq == 5
        assert self.log_verifies(make_log(), tenant)
