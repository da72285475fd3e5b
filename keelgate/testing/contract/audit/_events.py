"""Contract of ``AuditLog.events``."""

from __future__ import annotations

from keelgate.audit import AuditLog
from keelgate.testing.contract.audit._base import (
    LogContractBase,
    LogFactory,
    append_many,
    new_tenant,
)

__all__ = ["EventsContract"]

_LONG = 2_345
"""Longer than one page of a store that streams in pages of 1,000 or 2,000 rows."""


def _seqs(log: AuditLog, tenant: str, *, after_seq: int = 0, limit: int | None = None) -> list[int]:
    return [event.seq for event in log.events(tenant, after_seq=after_seq, limit=limit)]


class EventsContract(LogContractBase):
    """``events`` yields one tenant's chain in order, from ``after_seq``, up to ``limit``."""

    def test_empty_tenant_has_no_events(self, log: AuditLog, tenant: str) -> None:
        """A tenant that never appended yields nothing."""
        assert list(log.events(tenant)) == []

    def test_events_come_oldest_first(self, log: AuditLog, tenant: str) -> None:
        """Events are yielded in sequence order with their bodies."""
        append_many(log, tenant, 5)
        events = list(log.events(tenant))
        assert [event.seq for event in events] == [1, 2, 3, 4, 5]
        assert [event.body for event in events] == [{"n": n} for n in range(5)]

    def test_after_seq_skips_up_to_and_including_it(self, log: AuditLog, tenant: str) -> None:
        """after_seq=3 starts at seq 4."""
        append_many(log, tenant, 6)
        assert _seqs(log, tenant, after_seq=3) == [4, 5, 6]

    def test_limit_caps_the_count(self, log: AuditLog, tenant: str) -> None:
        """limit=2 yields the two oldest events."""
        append_many(log, tenant, 6)
        assert _seqs(log, tenant, limit=2) == [1, 2]

    def test_after_seq_and_limit_together_select_a_window(self, log: AuditLog, tenant: str) -> None:
        """after_seq=3, limit=4 yields seq 4..7."""
        append_many(log, tenant, 10)
        assert _seqs(log, tenant, after_seq=3, limit=4) == [4, 5, 6, 7]

    def test_limit_zero_yields_nothing(self, log: AuditLog, tenant: str) -> None:
        """limit=0 yields no events."""
        append_many(log, tenant, 3)
        assert _seqs(log, tenant, limit=0) == []

    def test_limit_beyond_the_end_yields_the_rest(self, log: AuditLog, tenant: str) -> None:
        """A limit larger than what is left yields what is left."""
        append_many(log, tenant, 4)
        assert _seqs(log, tenant, after_seq=2, limit=100) == [3, 4]

    def test_after_seq_at_or_past_the_head_yields_nothing(self, log: AuditLog, tenant: str) -> None:
        """after_seq equal to or beyond the head's seq yields nothing."""
        append_many(log, tenant, 3)
        assert _seqs(log, tenant, after_seq=3) == []
        assert _seqs(log, tenant, after_seq=50) == []

    def test_events_never_show_another_tenant(self, log: AuditLog) -> None:
        """Interleaved appends for two tenants: each tenant reads only its own events."""
        a, b = new_tenant(), new_tenant()
        for n in range(4):
            log.append(a, actor="x", kind="k", body={"of": "a", "n": n})
            log.append(b, actor="x", kind="k", body={"of": "b", "n": n})
        for tenant, mark in ((a, "a"), (b, "b")):
            events = list(log.events(tenant))
            assert {event.tenant_id for event in events} == {tenant}
            assert [event.body for event in events] == [{"of": mark, "n": n} for n in range(4)]
            assert [event.seq for event in events] == [1, 2, 3, 4]

    def test_long_chains_stream_completely_in_order(self, log: AuditLog, tenant: str) -> None:
        """A chain of thousands of events is yielded whole, in order, with windows intact."""
        append_many(log, tenant, _LONG)
        assert _seqs(log, tenant) == list(range(1, _LONG + 1))
        assert _seqs(log, tenant, after_seq=990, limit=1_100) == list(range(991, 2_091))

    def test_appending_while_iterating_does_not_block(self, log: AuditLog, tenant: str) -> None:
        """Appending between two reads of an open iterator neither deadlocks nor loses events."""
        append_many(log, tenant, 3)
        iterator = log.events(tenant)
        first = next(iterator)
        log.append(tenant, actor="x", kind="k", body={"late": True})
        rest = [event.seq for event in iterator]
        assert first.seq == 1
        assert rest[:2] == [2, 3]
        assert _seqs(log, tenant) == [1, 2, 3, 4]

    def test_a_new_handle_reads_everything_committed(self, make_log: LogFactory, tenant: str) -> None:
        """Events appended through one handle are all read back through a new one (durability)."""
        appended = append_many(make_log(), tenant, 7)
        assert list(make_log().events(tenant)) == appended
