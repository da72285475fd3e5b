"""Contract of retries: a refused message waits its backoff, is sent again, and is given up in the end."""

from __future__ import annotations

from django.utils import timezone

from notifications.claims import attempt_log
from notifications.passes import run_pass
from tests.site.notifications.contract._base import Harness

__all__ = ["RetryContract"]

GIVE_UP_WITHIN = 50
"""Attempts the suite allows a channel's backoff before it must give up."""


class RetryContract:
    """A failure is recorded, retried after the channel's backoff, and finally marked failed."""

    def test_a_refused_message_waits_its_backoff(self, harness: Harness) -> None:
        """Refused: pending again with the reason recorded, due after ``retry_after(1)``, not sent before."""
        harness.subscribe()
        harness.announce()
        harness.refuse(True)
        before = timezone.now()
        assert run_pass(harness.channel) == 0
        (delivery,) = harness.deliveries()
        assert (delivery.status, delivery.attempts) == ("pending", 1)
        assert delivery.last_error or delivery.last_status_code  # why, in the channel's terms
        assert delivery.lease_token == "" and delivery.finished_at is None
        wait = harness.channel.retry_after(1)
        assert wait is not None
        assert before + wait <= delivery.next_attempt_at <= timezone.now() + wait
        harness.refuse(False)
        if wait.total_seconds() > 1:
            assert run_pass(harness.channel) == 0  # not due yet
            assert harness.received() == 0

    def test_after_the_backoff_it_is_sent_once(self, harness: Harness) -> None:
        """Taken again once due: delivered on the next attempt, once."""
        harness.subscribe()
        harness.announce()
        harness.refuse(True)
        run_pass(harness.channel)
        harness.refuse(False)
        harness.later()
        assert run_pass(harness.channel) == 1
        harness.later()
        assert run_pass(harness.channel) == 0
        assert harness.received() == 1
        (delivery,) = harness.deliveries()
        assert (delivery.status, delivery.attempts, delivery.last_error) == ("delivered", 2, "")
        log = attempt_log(harness.channel.model)
        if log is not None:  # a channel that logs each try: the refusal, then the delivery, both finished
            rows = list(log._default_manager.filter(delivery=delivery).order_by("number"))
            assert [(a.number, a.finished_at is not None) for a in rows] == [(1, True), (2, True)]
            assert rows[0].error or rows[0].status_code  # why the first was refused

    def test_when_the_backoff_runs_out_it_is_failed_and_stays(self, harness: Harness) -> None:
        """After the attempt ``retry_after`` gives up on, it is failed, finished and never retried."""
        limit = next(n for n in range(1, GIVE_UP_WITHIN) if harness.channel.retry_after(n) is None)
        harness.subscribe()
        harness.announce()
        harness.refuse(True)
        for _ in range(limit):
            run_pass(harness.channel)
            harness.later()
        (delivery,) = harness.deliveries()
        assert (delivery.status, delivery.attempts) == ("failed", limit)
        assert delivery.finished_at is not None
        harness.refuse(False)
        assert run_pass(harness.channel) == 0
        assert harness.received() == 0
