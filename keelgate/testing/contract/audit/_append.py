"""Contract of ``AuditLog.append``."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from keelgate.audit import AuditEvent, AuditLog
from keelgate.testing.contract.audit._base import (
    LogContractBase,
    LogFactory,
    append_many,
    new_tenant,
)

__all__ = ["AppendContract"]

_THREADS = 20
_PER_THREAD = 10

UNICODE_BODY: dict[str, Any] = {
    "text": 'Zoë paid 12 € — 日本語 🚀 \u0000 "quoted" \\ back\nslash',
    "nested": {"list": [1, 2.5, -0.0, None, True, False, {"deep": ["x", {}]}], "empty": {}},
    "big": 2**53 - 1,
    "neg": -17,
    "float": 1e-300,
    "": "empty key",
}
"""Awkward but valid I-JSON (RFC 7493: integers within a double's precision, as RFC 8785
carries them): every store must hand it back exactly."""


class AppendContract(LogContractBase):
    """``append`` numbers and stores events durably, one log per tenant."""

    def test_first_event_is_seq_1(self, log: AuditLog, tenant: str) -> None:
        """A tenant's first event has seq 1 and the fields it was given."""
        event = log.append(tenant, actor="alice", kind="run.started", body={"run": "r1"})
        assert (event.tenant_id, event.seq) == (tenant, 1)
        assert (event.actor, event.kind, event.body) == ("alice", "run.started", {"run": "r1"})

    def test_sequence_numbers_run_from_1_without_gaps(self, log: AuditLog, tenant: str) -> None:
        """n appends get seq 1..n in order."""
        events = append_many(log, tenant, 12)
        assert [event.seq for event in events] == list(range(1, 13))

    def test_append_returns_the_event_as_stored(self, log: AuditLog, tenant: str) -> None:
        """What append returns equals what events() reads back."""
        appended = append_many(log, tenant, 3)
        assert list(log.events(tenant)) == appended

    def test_time_is_timezone_aware_utc(self, log: AuditLog, tenant: str) -> None:
        """Event times are timezone-aware with a zero UTC offset."""
        event = log.append(tenant, actor="a", kind="k", body={})
        assert event.at.utcoffset() == timedelta(0)

    def test_body_round_trips_exactly(self, make_log: LogFactory, tenant: str) -> None:
        """Unicode, nesting, big ints and awkward floats read back equal, also from a new handle."""
        appended = make_log().append(tenant, actor="a", kind="k", body=UNICODE_BODY)
        assert appended.body == UNICODE_BODY
        (stored,) = make_log().events(tenant)
        assert stored.body == UNICODE_BODY
        assert math.copysign(1.0, stored.body["nested"]["list"][2]) == -1.0

    def test_body_is_stored_as_its_json_form(self, log: AuditLog, tenant: str) -> None:
        """A tuple in the body reads back as a list, and the hash covers that form."""
        event = log.append(tenant, actor="a", kind="k", body={"pair": (1, 2)})
        assert event.body == {"pair": [1, 2]}
        assert self.log_verifies(log, tenant)

    def test_mutating_the_body_after_append_changes_nothing(self, log: AuditLog, tenant: str) -> None:
        """The log keeps its own copy of the body: the caller's later edits do not leak in."""
        body: dict[str, Any] = {"items": [1]}
        log.append(tenant, actor="a", kind="k", body=body)
        body["items"].append(2)
        assert [event.body for event in log.events(tenant)] == [{"items": [1]}]
        assert self.log_verifies(log, tenant)

    @pytest.mark.parametrize(
        "body",
        [{"x": object()}, {"x": {1, 2}}, {"x": float("nan")}, {"x": float("inf")}],
        ids=["object", "set", "nan", "inf"],
    )
    def test_non_json_body_raises_and_appends_nothing(
        self, log: AuditLog, tenant: str, body: dict[str, Any]
    ) -> None:
        """A body that is not JSON raises TypeError or ValueError and leaves the chain as it was."""
        first = log.append(tenant, actor="a", kind="k", body={"ok": True})
        with pytest.raises((TypeError, ValueError)):
            log.append(tenant, actor="a", kind="k", body=body)
        assert log.head(tenant) == first
        assert log.append(tenant, actor="a", kind="k", body={}).seq == 2

    def test_two_tenants_each_start_at_seq_1(self, log: AuditLog) -> None:
        """Interleaved appends to two tenants give each its own chain from seq 1."""
        a, b = new_tenant(), new_tenant()
        first_a = log.append(a, actor="x", kind="k", body={})
        first_b = log.append(b, actor="x", kind="k", body={})
        second_a = log.append(a, actor="x", kind="k", body={})
        assert (first_a.seq, first_b.seq, second_a.seq) == (1, 1, 2)

    def test_threads_sharing_one_handle_never_fork_the_chain(self, log: AuditLog, tenant: str) -> None:
        """20 threads appending at once through one handle give a gapless chain that verifies."""
        self._race(lambda _: log, log, tenant)

    def test_threads_with_their_own_handles_never_fork_the_chain(
        self, make_log: LogFactory, tenant: str
    ) -> None:
        """20 threads appending at once, each through its own handle, give a gapless chain."""
        handles = [make_log() for _ in range(_THREADS)]
        self._race(lambda index: handles[index], make_log(), tenant)

    def _race(self, handle_for: Callable[[int], AuditLog], reader: AuditLog, tenant: str) -> None:
        barrier = threading.Barrier(_THREADS)
        failures: list[BaseException] = []

        def work(index: int) -> None:
            log: AuditLog = handle_for(index)
            try:
                barrier.wait()
                for n in range(_PER_THREAD):
                    log.append(tenant, actor=f"thread-{index}", kind="k", body={"n": n})
            except BaseException as exc:  # re-raised in the test thread below
                failures.append(exc)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(_THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert failures == []
        events: list[AuditEvent] = list(reader.events(tenant))
        assert [event.seq for event in events] == list(range(1, _THREADS * _PER_THREAD + 1))
        assert len({event.hash for event in events}) == len(events)
        for index in range(_THREADS):
            mine = [event.body["n"] for event in events if event.actor == f"thread-{index}"]
            assert mine == list(range(_PER_THREAD))
        assert self.log_verifies(reader, tenant)
