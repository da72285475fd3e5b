"""Contract of ``IdempotencyStore.complete``."""

from __future__ import annotations

import pytest

from keelgate.errors import KeyNotOwnedError
from keelgate.idempotency import IdempotencyStore, KeyStatus
from keelgate.testing.contract.idempotency._base import (
    OTHER_TENANT,
    TENANT,
    KeyStoreFactory,
    StoreContractBase,
    claim,
    later,
    new_key,
)

__all__ = ["CompleteContract"]


class CompleteContract(StoreContractBase):
    """``complete`` stores an outcome only for the owner of an in-flight key."""

    def test_complete_by_owner_stores_outcome_and_time(self, store: IdempotencyStore) -> None:
        """The owner's complete makes the key COMPLETED with its outcome and completion time."""
        key = new_key()
        _, claimed = claim(store, key, owner="w1")
        done = store.complete(TENANT, key, owner="w1", outcome='{"id":42}', now=later(5))
        assert done.status is KeyStatus.COMPLETED
        assert done.outcome == '{"id":42}'
        assert done.completed_at == later(5)
        assert done.settled_by is None
        assert done.model_dump(exclude={"status", "outcome", "completed_at"}) == (
            claimed.model_dump(exclude={"status", "outcome", "completed_at"})
        )
        assert store.get(TENANT, key) == done

    def test_complete_by_wrong_owner_raises_and_changes_nothing(self, store: IdempotencyStore) -> None:
        """Another owner's complete raises KeyNotOwnedError and leaves the key in flight."""
        key = new_key()
        _, claimed = claim(store, key, owner="w1")
        with pytest.raises(KeyNotOwnedError):
            store.complete(TENANT, key, owner="w2", outcome='{"evil":1}', now=later(1))
        assert store.get(TENANT, key) == claimed

    def test_complete_twice_raises_and_keeps_first_outcome(self, store: IdempotencyStore) -> None:
        """A second complete, even by the owner, raises and keeps the first outcome."""
        key = new_key()
        claim(store, key, owner="w1")
        done = store.complete(TENANT, key, owner="w1", outcome='{"n":1}', now=later(1))
        with pytest.raises(KeyNotOwnedError):
            store.complete(TENANT, key, owner="w1", outcome='{"n":2}', now=later(2))
        assert store.get(TENANT, key) == done

    def test_complete_after_settle_raises_and_keeps_settlement(self, store: IdempotencyStore) -> None:
        """A fenced-off owner reporting after a settlement raises and cannot overwrite it."""
        key = new_key()
        claim(store, key, owner="w1")
        settled = store.settle(TENANT, key, executed=False, by="alice", outcome=None, now=later(1))
        with pytest.raises(KeyNotOwnedError):
            store.complete(TENANT, key, owner="w1", outcome='{"late":1}', now=later(2))
        assert store.get(TENANT, key) == settled

    def test_complete_of_unknown_key_raises(self, store: IdempotencyStore) -> None:
        """Completing a key nobody claimed raises and creates no record."""
        key = new_key()
        with pytest.raises(KeyNotOwnedError):
            store.complete(TENANT, key, owner="w1", outcome="{}", now=later(1))
        assert store.get(TENANT, key) is None

    def test_complete_in_another_tenant_raises(self, store: IdempotencyStore) -> None:
        """The owner of a key in one tenant cannot complete the same key in another tenant."""
        key = new_key()
        _, claimed = claim(store, key, owner="w1")
        with pytest.raises(KeyNotOwnedError):
            store.complete(OTHER_TENANT, key, owner="w1", outcome="{}", now=later(1))
        assert store.get(OTHER_TENANT, key) is None
        assert store.get(TENANT, key) == claimed

    def test_refusal_names_the_key(self, store: IdempotencyStore) -> None:
        """KeyNotOwnedError carries the key as its detail, so the refusal can be traced."""
        key = new_key()
        claim(store, key, owner="w1")
        with pytest.raises(KeyNotOwnedError) as caught:
            store.complete(TENANT, key, owner="w2", outcome="{}", now=later(1))
        assert caught.value.detail == key

    def test_completion_is_visible_through_another_handle(self, make_store: KeyStoreFactory) -> None:
        """Once complete returns, a second handle on the same storage reads the outcome."""
        first, second = make_store(), make_store()
        key = new_key()
        claim(first, key, owner="w1")
        done = first.complete(TENANT, key, owner="w1", outcome='{"ok":1}', now=later(1))
        assert second.get(TENANT, key) == done
