"""The audit log: append-only events per tenant, a Merkle tree over them, signed checkpoints.

Events written before the tree link into one sha256 hash chain per tenant; every event
is a leaf of an RFC 6962 tree (its RFC 8785 bytes, :func:`leaf_bytes`), whose roots are
signed as C2SP checkpoints (:func:`sign_note`, :func:`format_checkpoint`; a witness's
``cosignature/v1`` on one checks with :func:`note_cosignatures`) and whose
inclusion and consistency proofs (:func:`inclusion_proof`, :func:`consistency_proof`)
check here and with Go's ``sumdb/tlog``. A bundle of events with its checkpoint and
proofs (:func:`build_bundle`) is checked offline by :func:`verify_bundle`, as
``python -m keelgate.audit.verify`` does.

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

from keelgate.audit._bundle import BUNDLE_FORMAT, BundleError, BundleReport, build_bundle, verify_bundle
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
from keelgate.audit._leaf import (
    LEAF_FIELDS,
    MAX_SAFE_INTEGER,
    i_json,
    leaf_bytes,
    leaf_object,
    object_leaf_hash,
)
from keelgate.audit._memory import InMemoryAuditLog
from keelgate.audit._merkle import (
    EMPTY_ROOT,
    HashReader,
    ProofError,
    TreeBuilder,
    check_consistency,
    check_inclusion,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    new_nodes,
    node_hash,
    range_nodes,
    range_proof,
    root_from_nodes,
    root_from_range,
    tree_root,
)
from keelgate.audit._note import (
    Checkpoint,
    Cosignature,
    CosignerKey,
    NoteError,
    VerifierKey,
    cosign,
    cosigner_key,
    format_checkpoint,
    note_cosignatures,
    open_note,
    parse_checkpoint,
    sign_note,
    verifier_key,
    verify_cosignatures,
)
from keelgate.audit._protocol import AuditLog, RecordingAuditLog
from keelgate.audit._sqlite import SqliteAuditLog
from keelgate.audit._verify import ChainReport, StoredRow, verify, verify_chain, verify_rows

__all__ = [
    "BUNDLE_FORMAT",
    "EMPTY_ROOT",
    "GENESIS_HASH",
    "LEAF_FIELDS",
    "MAX_SAFE_INTEGER",
    "AuditEvent",
    "AuditLog",
    "BundleError",
    "BundleReport",
    "ChainReport",
    "Checkpoint",
    "Cosignature",
    "CosignerKey",
    "HashReader",
    "InMemoryAuditLog",
    "NoteError",
    "ProofError",
    "RecordingAuditLog",
    "SqliteAuditLog",
    "StoredRow",
    "TreeBuilder",
    "VerifierKey",
    "build_bundle",
    "check_consistency",
    "check_inclusion",
    "compute_hash",
    "consistency_proof",
    "cosign",
    "cosigner_key",
    "encode_body",
    "fast_canonical",
    "format_at",
    "format_checkpoint",
    "i_json",
    "in_stored_form",
    "inclusion_proof",
    "leaf_bytes",
    "leaf_hash",
    "leaf_object",
    "linked_parts",
    "new_nodes",
    "node_hash",
    "note_cosignatures",
    "object_leaf_hash",
    "open_note",
    "page_in_stored_form",
    "parse_checkpoint",
    "range_nodes",
    "range_proof",
    "root_from_nodes",
    "root_from_range",
    "sign_note",
    "stored_event",
    "tree_root",
    "verifier_key",
    "verify",
    "verify_bundle",
    "verify_chain",
    "verify_cosignatures",
    "verify_rows",
]
