"""The audit chain: append-only events, one sha256 hash chain per tenant.

Every event links to the previous one's hash, so :func:`verify` finds any edited,
deleted, inserted or reordered event; a head ``(seq, hash)`` exported elsewhere
proves later that history up to it was not rewritten (``expect_head``).

A store outside the engine (the Django site's) writes exactly the bytes the engine's
stores write with the encoding helpers: :func:`encode_body` (a body's stored text, once),
:func:`format_at` (the stored time), :func:`stored_event` (the hashed event from those),
:func:`fast_canonical` (the hashed bytes without a model), :func:`linked_parts` (those
bytes around the event's number, for a store whose database links the event), and
:func:`in_stored_form` / :func:`page_in_stored_form` (is stored text in the one form its
hash was taken over).
"""

from keelgate.audit._event import (
    GENESIS_HASH,
    AuditEvent,
    compute_hash,
    encode_body,
    fast_canonical,
    format_at,
    in_stored_form,
    linked_parts,
    page_in_stored_form,
    stored_event,
)
from keelgate.audit._memory import InMemoryAuditLog
from keelgate.audit._protocol import AuditLog, RecordingAuditLog
from keelgate.audit._sqlite import SqliteAuditLog
from keelgate.audit._verify import ChainReport, StoredRow, verify, verify_chain, verify_rows

__all__ = [
    "GENESIS_HASH",
    "AuditEvent",
    "AuditLog",
    "ChainReport",
    "InMemoryAuditLog",
    "RecordingAuditLog",
    "SqliteAuditLog",
    "StoredRow",
    "compute_hash",
    "encode_body",
    "fast_canonical",
    "format_at",
    "in_stored_form",
    "linked_parts",
    "page_in_stored_form",
    "stored_event",
    "verify",
    "verify_chain",
    "verify_rows",
]
