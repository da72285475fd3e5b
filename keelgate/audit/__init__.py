"""The audit chain: append-only events, one sha256 hash chain per tenant.

Every event links to the previous one's hash, so :func:`verify` finds any edited,
deleted, inserted or reordered event; a head ``(seq, hash)`` exported elsewhere
proves later that history up to it was not rewritten (``expect_head``).
"""

from keelgate.audit._event import GENESIS_HASH, AuditEvent, compute_hash
from keelgate.audit._memory import InMemoryAuditLog
from keelgate.audit._protocol import AuditLog
from keelgate.audit._sqlite import SqliteAuditLog
from keelgate.audit._verify import ChainReport, StoredRow, verify, verify_chain, verify_rows

__all__ = [
    "GENESIS_HASH",
    "AuditEvent",
    "AuditLog",
    "ChainReport",
    "InMemoryAuditLog",
    "SqliteAuditLog",
    "StoredRow",
    "compute_hash",
    "verify",
    "verify_chain",
    "verify_rows",
]
