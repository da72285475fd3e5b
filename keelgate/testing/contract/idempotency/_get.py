"""Contract of ``IdempotencyStore.get``: tenancy, durability and stored time."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from keelgate.idempotency import ClaimStatus, IdempotencyStore, KeyStatus
from keelgate.testing.contract.idempotency._base import (
    LEASE_SECONDS,
    OTHER_TENANT,
    TENANT,
    KeyStoreFactory,
    StoreContractBase,
    claim,
    later,
    new_key,
)

__all__ = ["GetContract"]


class GetContract(StoreContractBase):
    """``get`` reads back exactly what was committed, within one tenant."""

    def test_get_of_unknown_key_is_none(self, store: IdempotencyStore) -> None:
        """A key nobody claimed reads as None."""
        assert store.get(TENANT, new_key()) is None

    def test_get_never_crosses_tenants(self, store: IdempotencyStore) -> None:
        """A key claimed in one tenant reads as None in another."""
        key = new_key()
        claim(store, key, tenant_id=TENANT)
        assert store.get(OTHER_TENANT, key) is None

    def test_same_key_in_two_tenants_is_two_records(self, store: IdempotencyStore) -> None:
        """The same key claimed in two tenants is two independent records."""
        key = new_key()
        status_a, _ = claim(store, key, tenant_id=TENANT, owner="wa")
        status_b, record_b = claim(store, key, tenant_id=OTHER_TENANT, owner="wb")
        assert (status_a, status_b) == (ClaimStatus.CLAIMED, ClaimStatus.CLAIMED)
        done_a = store.complete(TENANT, key, owner="wa", outcome='{"a":1}', now=later(1))
        assert store.get(TENANT, key) == done_a
        assert store.get(OTHER_TENANT, key) == record_b
        assert record_b.tenant_id == OTHER_TENANT
        assert record_b.owner == "wb"

    def test_reopened_store_keeps_every_record(self, make_store: KeyStoreFactory) -> None:
        """A new handle on the same storage reads the in-flight, completed and abandoned keys."""
        first = make_store()
        in_flight, completed, abandoned = new_key(), new_key(), new_key()
        _, claimed = claim(first, in_flight, owner="w1")
        claim(first, completed, owner="w1")
        done = first.complete(TENANT, completed, owner="w1", outcome='{"x":1}', now=later(1))
        claim(first, abandoned, owner="w1")
        gave_up = first.settle(TENANT, abandoned, executed=False, by="alice", outcome=None, now=later(2))
        reopened = make_store()
        assert reopened.get(TENANT, in_flight) == claimed
        assert reopened.get(TENANT, completed) == done
        assert reopened.get(TENANT, abandoned) == gave_up
        status, _ = claim(reopened, in_flight, owner="w2", now=later(3))
        assert status is ClaimStatus.IN_FLIGHT

    def test_datetimes_come_back_timezone_aware(self, make_store: KeyStoreFactory) -> None:
        """Every stored time reads back timezone-aware and equal to the instant written."""
        first = make_store()
        key = new_key()
        offset = timezone(timedelta(hours=5, minutes=30))
        claimed_at = datetime(2025, 6, 30, 23, 59, 58, 654321, tzinfo=offset)
        completed_at = claimed_at + timedelta(seconds=2)
        claim(first, key, owner="w1", now=claimed_at)
        first.complete(TENANT, key, owner="w1", outcome="{}", now=completed_at)
        record = make_store().get(TENANT, key)
        assert record is not None
        assert record.status is KeyStatus.COMPLETED
        assert record.completed_at is not None
        for value in (record.claimed_at, record.lease_expires_at, record.completed_at):
            assert value.tzinfo is not None
            assert value.utcoffset() is not None
        assert record.claimed_at == claimed_at
        assert record.lease_expires_at == claimed_at + timedelta(seconds=LEASE_SECONDS)
        assert record.completed_at == completed_at
