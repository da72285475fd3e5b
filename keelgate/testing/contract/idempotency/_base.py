"""Shared fixtures and helpers of the idempotency store contract."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from keelgate.idempotency import ClaimStatus, IdempotencyRecord, IdempotencyStore

__all__ = [
    "LEASE_SECONDS",
    "NOW",
    "OTHER_TENANT",
    "TENANT",
    "KeyStoreFactory",
    "StoreContractBase",
    "claim",
    "later",
    "new_key",
]

KeyStoreFactory = Callable[[], IdempotencyStore]
"""Opens a handle on the store under test; every call opens one over the same storage."""

TENANT = "tenant-a"
OTHER_TENANT = "tenant-b"
NOW = datetime(2025, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
"""Fixed and with microseconds, so a store that truncates time is caught."""
LEASE_SECONDS = 30.0


def later(seconds: float) -> datetime:
    """A moment after :data:`NOW`."""
    return NOW + timedelta(seconds=seconds)


def new_key() -> str:
    """A key no other test uses, so stores that share storage across tests still pass."""
    return f"kg_contract_{uuid.uuid4().hex}"


def claim(
    store: IdempotencyStore,
    key: str,
    *,
    owner: str = "owner-1",
    tenant_id: str = TENANT,
    run_id: str = "run-1",
    action_id: str = "act-1",
    now: datetime = NOW,
) -> tuple[ClaimStatus, IdempotencyRecord]:
    """``store.claim`` with the contract's defaults."""
    return store.claim(
        tenant_id,
        key,
        owner=owner,
        run_id=run_id,
        action_id=action_id,
        now=now,
        lease_seconds=LEASE_SECONDS,
    )


class StoreContractBase:
    """Declares the fixtures every part of the contract uses."""

    @pytest.fixture
    def make_store(self) -> KeyStoreFactory:
        """Overridden by the subclass: see :class:`IdempotencyStoreContract`."""
        raise NotImplementedError("subclasses of IdempotencyStoreContract define make_store")

    @pytest.fixture
    def store(self, make_store: KeyStoreFactory) -> IdempotencyStore:
        """One handle on the store under test."""
        return make_store()
