"""Contract of ``IdempotencyStore.claim``."""

from __future__ import annotations

import threading

from keelgate.idempotency import ClaimStatus, IdempotencyRecord, IdempotencyStore, KeyStatus
from keelgate.testing.contract.idempotency._base import (
    LEASE_SECONDS,
    NOW,
    TENANT,
    KeyStoreFactory,
    StoreContractBase,
    claim,
    later,
    new_key,
)

__all__ = ["ClaimContract"]

_RACERS = 16


class ClaimContract(StoreContractBase):
    """``claim`` is atomic, reports what is stored, and never changes a record."""

    def test_first_claim_is_claimed_with_owner_run_action_and_lease(self, store: IdempotencyStore) -> None:
        """The first claim of a key returns CLAIMED and stores owner, run, action and lease."""
        key = new_key()
        status, record = claim(store, key, owner="w1", run_id="run-7", action_id="act-3")
        assert status is ClaimStatus.CLAIMED
        assert record.tenant_id == TENANT
        assert record.key == key
        assert record.status is KeyStatus.IN_FLIGHT
        assert (record.owner, record.run_id, record.action_id) == ("w1", "run-7", "act-3")
        assert record.claimed_at == NOW
        assert record.lease_expires_at == later(LEASE_SECONDS)
        assert (record.completed_at, record.outcome, record.settled_by) == (None, None, None)
        assert store.get(TENANT, key) == record

    def test_second_claim_sees_in_flight_and_leaves_record_unchanged(self, store: IdempotencyStore) -> None:
        """A claim by another owner reports IN_FLIGHT with the first owner's record, unchanged."""
        key = new_key()
        _, first = claim(store, key, owner="w1")
        status, seen = claim(store, key, owner="w2", run_id="run-2", action_id="act-2", now=later(60))
        assert status is ClaimStatus.IN_FLIGHT
        assert seen == first
        assert store.get(TENANT, key) == first

    def test_same_owner_claiming_again_sees_in_flight(self, store: IdempotencyStore) -> None:
        """Even the owner's own second claim is not CLAIMED: a key is claimed once, ever."""
        key = new_key()
        _, first = claim(store, key, owner="w1")
        status, seen = claim(store, key, owner="w1", now=later(1))
        assert status is ClaimStatus.IN_FLIGHT
        assert seen == first

    def test_claim_after_complete_reports_completed_with_outcome(self, store: IdempotencyStore) -> None:
        """A claim of a completed key returns COMPLETED and the stored outcome to replay."""
        key = new_key()
        claim(store, key, owner="w1")
        done = store.complete(TENANT, key, owner="w1", outcome='{"ok":true}', now=later(1))
        status, seen = claim(store, key, owner="w2", now=later(2))
        assert status is ClaimStatus.COMPLETED
        assert seen.outcome == '{"ok":true}'
        assert seen == done

    def test_claim_after_abandon_reports_abandoned(self, store: IdempotencyStore) -> None:
        """A claim of a key settled as not executed returns ABANDONED and does not reclaim it."""
        key = new_key()
        claim(store, key, owner="w1")
        settled = store.settle(TENANT, key, executed=False, by="alice", outcome=None, now=later(1))
        status, seen = claim(store, key, owner="w2", now=later(2))
        assert status is ClaimStatus.ABANDONED
        assert seen == settled
        assert store.get(TENANT, key) == settled

    def test_claim_after_settle_executed_reports_completed(self, store: IdempotencyStore) -> None:
        """A claim of a key settled as executed returns COMPLETED with the settled outcome."""
        key = new_key()
        claim(store, key, owner="w1")
        store.settle(TENANT, key, executed=True, by="alice", outcome='{"n":1}', now=later(1))
        status, seen = claim(store, key, owner="w2", now=later(2))
        assert status is ClaimStatus.COMPLETED
        assert seen.outcome == '{"n":1}'

    def test_racing_claims_through_two_handles_have_one_winner(self, make_store: KeyStoreFactory) -> None:
        """16 threads claiming one key through two handles: exactly one gets CLAIMED."""
        handles = [make_store(), make_store()]
        key = new_key()
        barrier = threading.Barrier(_RACERS)
        results: list[tuple[ClaimStatus, IdempotencyRecord]] = []
        errors: list[BaseException] = []
        guard = threading.Lock()

        def racer(i: int) -> None:
            try:
                barrier.wait(timeout=30)
                outcome = claim(handles[i % 2], key, owner=f"w{i}")
            except BaseException as exc:  # reported below, not lost in the thread
                with guard:
                    errors.append(exc)
                return
            with guard:
                results.append(outcome)

        threads = [threading.Thread(target=racer, args=(i,)) for i in range(_RACERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert errors == []
        assert len(results) == _RACERS
        winners = [record for status, record in results if status is ClaimStatus.CLAIMED]
        assert len(winners) == 1
        losers = [status for status, _ in results if status is not ClaimStatus.CLAIMED]
        assert losers == [ClaimStatus.IN_FLIGHT] * (_RACERS - 1)
        assert {record.owner for _, record in results} == {winners[0].owner}
        assert handles[0].get(TENANT, key) == winners[0]
        assert handles[1].get(TENANT, key) == winners[0]
