"""The worker's lease renewer: one thread kept from run to run, renewing only the claim it holds.

The renewer replaced a thread started and joined per run. What it must still do: renew
every third of the lease while a claim is attached, never renew a claim once
:meth:`detach` has returned (the run is then released by the worker), stop at the
first lost renewal, and leave no thread behind once idle or closed.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest

from runs.engine import worker as worker_module
from runs.engine.worker import Claim, Worker, _Renewer


@dataclass
class FakeWorker:
    """Records each renewal: which claim, on which thread, when; loses the lease on request."""

    lease_seconds: float = 0.15
    renewals: list[tuple[str, int, float]] = field(default_factory=list)
    lose: set[str] = field(default_factory=set)
    slow: float = 0.0

    def _renew_once(self, claim: Claim, lost: threading.Event, cancel: threading.Event) -> None:
        if self.slow:
            time.sleep(self.slow)
        self.renewals.append((claim.run_id, threading.get_ident(), time.monotonic()))
        if claim.run_id in self.lose:
            lost.set()


def claim(run_id: str) -> Claim:
    return Claim(pk=1, tenant_id="t1", run_id=run_id, agent="a", goal="g", epoch=1, as_of=datetime.now(UTC))


def attach(renewer: _Renewer, run_id: str) -> tuple[Claim, threading.Event, threading.Event]:
    job = (claim(run_id), threading.Event(), threading.Event())
    renewer.attach(*job)
    return job


def test_one_thread_renews_consecutive_claims_every_third_of_the_lease():
    fake = FakeWorker()
    renewer = _Renewer(fake)  # type: ignore[arg-type]
    try:
        attach(renewer, "a")
        time.sleep(0.4)
        renewer.detach(timeout=5)
        attach(renewer, "b")
        time.sleep(0.4)
        renewer.detach(timeout=5)
    finally:
        renewer.close()
    runs = [r for r, _, _ in fake.renewals]
    assert runs.count("a") >= 2 and runs.count("b") >= 2
    assert runs == sorted(runs)  # every renewal of a before the first of b
    assert len({tid for _, tid, _ in fake.renewals}) == 1  # one thread for both runs
    gaps = [b - a for (_, _, a), (_, _, b) in zip(fake.renewals, fake.renewals[1:], strict=False)]
    assert min(gaps) >= 0.04  # not a busy loop: about a third of the 0.15 s lease apart


def test_no_renewal_of_a_claim_after_detach_returns():
    """detach waits for a renewal in flight, and none starts after it."""
    fake = FakeWorker(slow=0.1)
    renewer = _Renewer(fake)  # type: ignore[arg-type]
    try:
        attach(renewer, "a")
        time.sleep(0.08)  # the first renewal is due at 0.05 s and takes 0.1 s: in flight now
        renewer.detach(timeout=5)
        detached = time.monotonic()
        count = len(fake.renewals)
        assert count == 1  # the one in flight finished before detach returned
        time.sleep(0.3)
        assert len(fake.renewals) == count
        assert all(t <= detached for _, _, t in fake.renewals)
    finally:
        renewer.close()


def test_a_lost_renewal_is_the_last_of_that_claim():
    fake = FakeWorker(lose={"a"})
    renewer = _Renewer(fake)  # type: ignore[arg-type]
    try:
        _, lost, _ = attach(renewer, "a")
        assert lost.wait(2)
        time.sleep(0.3)
        assert [r for r, _, _ in fake.renewals] == ["a"]
        renewer.detach(timeout=5)
        attach(renewer, "b")  # the next claim is renewed again
        time.sleep(0.3)
        assert "b" in [r for r, _, _ in fake.renewals]
    finally:
        renewer.close()


def test_the_thread_ends_when_idle_and_when_closed(monkeypatch):
    monkeypatch.setattr(_Renewer, "IDLE_SECONDS", 0.2)
    fake = FakeWorker()
    renewer = _Renewer(fake)  # type: ignore[arg-type]
    attach(renewer, "a")
    thread = renewer._thread
    assert thread is not None and thread.is_alive()
    renewer.detach(timeout=5)
    thread.join(timeout=5)
    assert not thread.is_alive() and renewer._thread is None
    attach(renewer, "b")  # a new claim starts a new thread
    second = renewer._thread
    assert second is not None and second is not thread and second.is_alive()
    renewer.close()
    assert not second.is_alive()


@pytest.mark.django_db(transaction=True)
def test_a_worker_runs_its_runs_with_one_renewer_thread(operator, brokerage_path, monkeypatch):
    """Three runs through one Worker with a short lease: renewed on one thread, none after release."""
    from runs.models import Run, RunStatus
    from runs.services import run_start

    threads: list[int] = []
    original = Worker._renew_once

    def recorded(self, claim, lost, cancel):
        threads.append(threading.get_ident())
        original(self, claim, lost, cancel)

    monkeypatch.setattr(worker_module.Worker, "_renew_once", recorded)
    slow_drive = Worker._drive

    def slow(self, claim, *, should_stop):
        time.sleep(0.25)  # long enough for renewals every 0.1 s of a 0.3 s lease
        return slow_drive(self, claim, should_stop=should_stop)

    monkeypatch.setattr(worker_module.Worker, "_drive", slow)
    for i in range(3):
        run_start(tenant_id="t1", agent="paper-trader", goal="buy 1 ACME", user=operator, run_id=f"rn{i}")
    worker = Worker(lease_seconds=0.3)
    try:
        while worker.run_once():
            pass
    finally:
        worker.close()
    assert len(threads) >= 3 and len(set(threads)) == 1
    rows = Run.objects.filter(run_id__startswith="rn")
    assert {r.status for r in rows} == {RunStatus.WAITING}
    assert all(
        r.lease_expires_at is None and r.lease_owner == "" for r in rows
    )  # released, not renewed after
