"""Contract of ``IdempotencyStore.settle`` (the reconcile path)."""

from __future__ import annotations

import pytest

from keelgate.errors import KeyNotOwnedError
from keelgate.idempotency import IdempotencyStore, KeyStatus
from keelgate.testing.contract.idempotency._base import (
    TENANT,
    StoreContractBase,
    claim,
    later,
    new_key,
)

__all__ = ["SettleContract"]

_CLAIM_FIELDS = {"tenant_id", "key", "owner", "run_id", "action_id", "claimed_at"}


class SettleContract(StoreContractBase):
    """``settle`` decides an in-flight key, whoever owns it, and nothing else."""

    def test_settle_executed_stores_outcome_and_settled_by(self, store: IdempotencyStore) -> None:
        """settle(executed=True) makes the key COMPLETED with the outcome and who settled it."""
        key = new_key()
        _, claimed = claim(store, key, owner="w1")
        settled = store.settle(TENANT, key, executed=True, by="alice", outcome='{"ref":"A-1"}', now=later(9))
        assert settled.status is KeyStatus.COMPLETED
        assert settled.outcome == '{"ref":"A-1"}'
        assert settled.settled_by == "alice"
        assert settled.completed_at == later(9)
        assert settled.model_dump(include=_CLAIM_FIELDS) == claimed.model_dump(include=_CLAIM_FIELDS)
        assert store.get(TENANT, key) == settled

    def test_settle_not_executed_abandons(self, store: IdempotencyStore) -> None:
        """settle(executed=False) makes the key ABANDONED, attributed to who settled it."""
        key = new_key()
        _, claimed = claim(store, key, owner="w1")
        settled = store.settle(TENANT, key, executed=False, by="bob", outcome=None, now=later(3))
        assert settled.status is KeyStatus.ABANDONED
        assert settled.settled_by == "bob"
        assert settled.outcome is None
        assert settled.model_dump(include=_CLAIM_FIELDS) == claimed.model_dump(include=_CLAIM_FIELDS)
        assert store.get(TENANT, key) == settled

    def test_settle_of_completed_key_raises_and_changes_nothing(self, store: IdempotencyStore) -> None:
        """A key the owner already completed cannot be settled; its outcome stays."""
        key = new_key()
        claim(store, key, owner="w1")
        done = store.complete(TENANT, key, owner="w1", outcome='{"n":1}', now=later(1))
        with pytest.raises(KeyNotOwnedError):
            store.settle(TENANT, key, executed=False, by="alice", outcome=None, now=later(2))
        assert store.get(TENANT, key) == done

    def test_settle_twice_raises_and_keeps_first_verdict(self, store: IdempotencyStore) -> None:
        """A second settlement raises and the first verdict stands."""
        key = new_key()
        claim(store, key, owner="w1")
        first = store.settle(TENANT, key, executed=False, by="alice", outcome=None, now=later(1))
        with pytest.raises(KeyNotOwnedError):
            store.settle(TENANT, key, executed=True, by="bob", outcome='{"n":1}', now=later(2))
        assert store.get(TENANT, key) == first

    def test_settle_of_unknown_key_raises(self, store: IdempotencyStore) -> None:
        """Settling a key nobody claimed raises and creates no record."""
        key = new_key()
        with pytest.raises(KeyNotOwnedError):
            store.settle(TENANT, key, executed=True, by="alice", outcome="{}", now=later(1))
        assert store.get(TENANT, key) is None
