"""Contract of claims: one sender per message, the attempt counted before it goes, a dead claim retaken."""

from __future__ import annotations

from django.utils import timezone

from notifications.channel import Delivered
from notifications.claims import attempt_log, claim, record
from notifications.cursors import tail
from notifications.passes import deliver, run_pass
from tests.site.notifications.contract._base import Harness

__all__ = ["ClaimContract"]


def _queued(harness: Harness) -> list[int]:
    harness.subscribe()
    harness.announce()
    tail(harness.channel)
    return [d.pk for d in harness.deliveries()]


class ClaimContract:
    """``claim`` hands a due message to exactly one sender under a lease; ``record`` finishes it."""

    def test_a_claim_is_exclusive(self, harness: Harness) -> None:
        """Of two claims of the same due deliveries, the second gets nothing."""
        pks = _queued(harness)
        assert claim(harness.channel, pks) is not None
        assert claim(harness.channel, pks) is None

    def test_a_claim_counts_the_attempt_and_holds_a_lease_before_sending(self, harness: Harness) -> None:
        """A claimed delivery is delivering, its attempt counted, its lease ahead, nothing sent yet."""
        pks = _queued(harness)
        held = claim(harness.channel, pks)
        assert held is not None
        (delivery,) = harness.deliveries()
        assert (delivery.status, delivery.attempts, delivery.lease_token) == ("delivering", 1, held.token)
        assert delivery.lease_until is not None and delivery.lease_until > timezone.now()
        assert harness.received() == 0
        log = attempt_log(harness.channel.model)
        if log is not None:  # a channel that logs each try has its row before the try
            rows = log._default_manager.filter(delivery=delivery).values_list("number", "finished_at")
            assert list(rows) == [(1, None)]

    def test_a_claim_whose_lease_holds_keeps_other_senders_off(self, harness: Harness) -> None:
        """While a (perhaps dead) sender's lease holds, a pass sends nothing."""
        pks = _queued(harness)
        assert claim(harness.channel, pks) is not None
        assert deliver(harness.channel) == 0
        assert harness.received() == 0

    def test_a_lapsed_claim_is_sent_again_once(self, harness: Harness) -> None:
        """At least once: a sender that died holding a claim is replaced when its lease runs out."""
        pks = _queued(harness)
        assert claim(harness.channel, pks) is not None  # and then the sender died
        harness.later()
        assert deliver(harness.channel) == 1
        assert harness.received() == 1
        (delivery,) = harness.deliveries()
        assert (delivery.status, delivery.attempts) == ("delivered", 2)

    def test_delivered_is_final(self, harness: Harness) -> None:
        """A delivered message is not sent again, by a later pass or after time passes."""
        harness.subscribe()
        harness.announce()
        assert run_pass(harness.channel) == 1
        harness.later()
        assert run_pass(harness.channel) == 0
        assert harness.received() == 1
        (delivery,) = harness.deliveries()
        assert delivery.status == "delivered" and delivery.finished_at is not None

    def test_a_late_result_of_a_lapsed_claim_still_counts_as_delivered(self, harness: Harness) -> None:
        """Delivered is delivered, even if the sender's lease ran out and another claim holds it now."""
        pks = _queued(harness)
        first = claim(harness.channel, pks)
        assert first is not None
        harness.later()
        assert claim(harness.channel, pks) is not None  # a second sender took over
        record(harness.channel, first, Delivered())
        (delivery,) = harness.deliveries()
        assert delivery.status == "delivered" and delivery.lease_token == ""
