"""Contract of the chain cursor: what the chain announces is recorded once, with the cursor's move."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from audit.selectors import audit_heads
from notifications.cursors import tail
from tests.site._threads import all_returned, at_once
from tests.site.notifications.contract._base import Harness

__all__ = ["TailContract"]


class TailContract:
    """``tail`` turns each new event the channel wants into deliveries, exactly once."""

    def test_an_announced_event_becomes_a_delivery_and_moves_the_cursor(self, harness: Harness) -> None:
        """After one announcement, a tail records one pending delivery and the cursor stands at the head."""
        harness.subscribe()
        harness.announce()
        assert tail(harness.channel) == 1
        (delivery,) = harness.deliveries()
        assert delivery.status == "pending" and delivery.attempts == 0
        assert harness.cursor().seq == audit_heads([harness.tenant_id])[harness.tenant_id]

    def test_a_second_tail_records_nothing_again(self, harness: Harness) -> None:
        """Nothing twice: a tail over a stretch already read records nothing."""
        harness.subscribe()
        harness.announce()
        assert tail(harness.channel) == 1
        assert tail(harness.channel) == 0
        assert len(harness.deliveries()) == 1

    def test_events_it_does_not_want_make_nothing_but_are_passed(self, harness: Harness) -> None:
        """An event of another kind makes no delivery, and the cursor moves past it."""
        harness.subscribe()
        harness.unwanted()
        assert tail(harness.channel) == 0
        assert harness.deliveries() == []
        assert harness.cursor().seq == audit_heads([harness.tenant_id])[harness.tenant_id]

    def test_a_tail_that_fails_records_nothing_and_moves_no_cursor(
        self, harness: Harness, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A route that raises rolls back: no delivery, the cursor where it was; the next tail has it."""
        harness.subscribe()
        tail(harness.channel)
        before = harness.cursor().seq
        harness.announce()
        route = harness.channel.route

        def broken(*args: object, **kwargs: object) -> object:
            route(*args, **kwargs)  # type: ignore[arg-type]
            raise RuntimeError("the process died here")

        monkeypatch.setattr(harness.channel, "route", broken)
        assert tail(harness.channel) == 0
        assert harness.deliveries() == [] and harness.cursor().seq == before
        monkeypatch.undo()
        assert tail(harness.channel) == 1

    def test_a_tail_with_nothing_new_writes_nothing(self, harness: Harness) -> None:
        """Once caught up, a tail only reads: no insert, update or row lock."""
        harness.subscribe()
        harness.announce()
        tail(harness.channel)
        with CaptureQueriesContext(connection) as queries:
            assert tail(harness.channel) == 0
        writes = [
            q["sql"]
            for q in queries
            if q["sql"].lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE", "SAVEPOINT"))
            or q["sql"].upper().endswith("FOR UPDATE")
            or " FOR UPDATE " in q["sql"].upper()
        ]
        assert writes == []

    def test_tails_at_once_record_each_delivery_once(self, harness: Harness) -> None:
        """Four tails racing over the same new events record what one tail would, once."""
        harness.subscribe()
        harness.announce()
        tail(harness.channel)  # the cursor exists: the race is over moving it
        harness.announce(3)
        all_returned(at_once([lambda: tail(harness.channel)] * 4))
        assert tail(harness.channel) == 0
        assert len(harness.deliveries()) == harness.routed(1) + harness.routed(3)
