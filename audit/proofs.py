"""Proofs from a tenant's stored tree: one event is in it, and it only grew.

Both read the O(log n) stored subtree hashes they need in one query
(:func:`audit.tree.node_reader`) and answer in RFC 9162 order, which Go's
``sumdb/tlog`` (``CheckRecord``, ``CheckTree``) and :mod:`keelgate.audit` check.
Retiring old events keeps every stored hash, so consistency proofs between any two sizes,
and inclusion proofs of the events kept, are the same after a retirement as before.
"""

from __future__ import annotations

from dataclasses import dataclass

from audit.checkpoints import latest_checkpoint, log_verifier_key
from audit.models import AuditEvent as EventRow
from audit.models import ChainHead, Checkpoint
from audit.retired import refuse_retired
from audit.tree import event_leaf, node_reader
from audit.wiring import integrate_pending
from keelgate.audit import (
    NoteError,
    check_inclusion,
    consistency_proof,
    inclusion_proof,
    object_leaf_hash,
    open_note,
    parse_checkpoint,
)
from sitekit.errors import ProofRangeError

__all__ = [
    "ConsistencyProof",
    "InclusionCheck",
    "InclusionProof",
    "check_event",
    "consistency",
    "inclusion",
    "log_size",
]


@dataclass(frozen=True)
class InclusionProof:
    """The event numbered ``leaf_index + 1`` is in the tree of ``tree_size`` leaves."""

    leaf_index: int
    tree_size: int
    hashes: list[bytes]


@dataclass(frozen=True)
class ConsistencyProof:
    """The tree of ``first`` leaves is a prefix of the tree of ``second``."""

    first: int
    second: int
    hashes: list[bytes]


def log_size(tenant_id: str) -> int:
    """How many events the tenant's tree holds now."""
    integrate_pending([tenant_id])
    return ChainHead.objects.filter(tenant_id=tenant_id).values_list("seq", flat=True).first() or 0


def inclusion(tenant_id: str, *, seq: int, tree_size: int | None = None) -> InclusionProof:
    """The proof that event ``seq`` is in the tree of ``tree_size`` (default: the whole log).

    Raises :class:`ProofRangeError` naming the parameter out of range, and
    :class:`AuditRetiredError` for a retired event (the live log no longer serves it, though
    its hash stays in the tree: the archive proves it).
    """
    size = log_size(tenant_id)
    tree_size = _within("tree_size", size if tree_size is None else tree_size, size, "the log's size")
    _within("seq", seq, tree_size, "tree_size")
    refuse_retired(tenant_id, seq, "seq")
    return InclusionProof(seq - 1, tree_size, inclusion_proof(seq - 1, tree_size, node_reader(tenant_id)))


def consistency(tenant_id: str, *, first: int, second: int | None = None) -> ConsistencyProof:
    """The proof that the tree of ``first`` leaves is a prefix of the one of ``second``.

    Raises :class:`ProofRangeError` naming the parameter out of range.
    """
    size = log_size(tenant_id)
    second = _within("second", size if second is None else second, size, "the log's size")
    _within("first", first, second, "second")
    return ConsistencyProof(first, second, consistency_proof(first, second, node_reader(tenant_id)))


def _within(field: str, value: int, high: int, what: str) -> int:
    """``value``, if it is between 1 and ``high``; else :class:`ProofRangeError` naming ``field``."""
    if not 1 <= value <= high:
        raise ProofRangeError(field, f"between 1 and {what}, {high}")
    return value


@dataclass(frozen=True)
class InclusionCheck:
    """An event's inclusion proof, checked here against the newest signed checkpoint."""

    ok: bool
    number: int
    """The checkpoint's ordinal among the tenant's (the first signed is 1)."""
    size: int
    signer: str
    """The key name whose signature on the checkpoint verified ("" if none did)."""
    reason: str
    """Why it did not check ("" when it did)."""


def check_event(tenant_id: str, seq: int) -> InclusionCheck | None:
    """Check event ``seq`` is in the newest checkpoint the way an auditor would: the
    note's signature with the tenant's verifier key, the leaf recomputed from the stored
    event, its proof to the note's root. None before a checkpoint covers the event."""
    checkpoint = latest_checkpoint(tenant_id)
    if checkpoint is None or checkpoint.size < seq:
        return None
    number = Checkpoint.objects.filter(tenant_id=tenant_id, size__lte=checkpoint.size).count()
    key = log_verifier_key(tenant_id)
    try:
        text, signers = open_note(checkpoint.note, [key])
        body = parse_checkpoint(text)
    except NoteError as exc:
        return InclusionCheck(False, number, checkpoint.size, "", f"the checkpoint does not verify: {exc}")
    row = EventRow.objects.filter(tenant_id=tenant_id, seq=seq).first()
    if row is None:
        return InclusionCheck(False, number, body.size, signers[0].name, "the event is missing")
    try:
        leaf = object_leaf_hash(event_leaf(row))
        proof = inclusion(tenant_id, seq=seq, tree_size=body.size)
        check_inclusion(seq - 1, body.size, leaf, proof.hashes, body.root)
    except (ValueError, LookupError) as exc:  # ProofError is a ValueError; a node missing, a LookupError
        return InclusionCheck(False, number, body.size, signers[0].name, str(exc))
    return InclusionCheck(True, number, body.size, signers[0].name, "")
