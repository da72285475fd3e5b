"""Durable idempotency keys: a WRITE runs at most once per key, and its result is replayed.

See :class:`IdempotencyStore` for the contract every store honours, and
:func:`derive_key` for how a tool call's key is made.
"""

from keelgate.idempotency._keys import derive_key
from keelgate.idempotency._memory import InMemoryIdempotencyStore
from keelgate.idempotency._protocol import (
    ClaimStatus,
    IdempotencyRecord,
    IdempotencyStore,
    KeyStatus,
)
from keelgate.idempotency._sqlite import SqliteIdempotencyStore

__all__ = [
    "ClaimStatus",
    "IdempotencyRecord",
    "IdempotencyStore",
    "InMemoryIdempotencyStore",
    "KeyStatus",
    "SqliteIdempotencyStore",
    "derive_key",
]
