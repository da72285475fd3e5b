"""Proofs from a tenant's stored tree: one event is in it, and it only grew.

Both read the O(log n) stored subtree hashes they need in one query
(:func:`audit.tree.node_reader`) and answer in RFC 9162 order, which Go's
``sumdb/tlog`` (``CheckRecord``, ``CheckTree``) and :mod:`keelgate.audit` check.
"""

from __future__ import annotations

from dataclasses import dataclass

from audit.models import ChainHead
from audit.tree import node_reader
from audit.wiring import integrate_pending
from keelgate.audit import consistency_proof, inclusion_proof
from sitekit.errors import ProofRangeError

__all__ = ["ConsistencyProof", "InclusionProof", "consistency", "inclusion", "log_size"]


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

    Raises :class:`ProofRangeError` naming the parameter out of range.
    """
    size = log_size(tenant_id)
    tree_size = size if tree_size is None else tree_size
    if not 1 <= tree_size <= size:
        raise ProofRangeError("tree_size", f"between 1 and the log's size, {size}")
    if not 1 <= seq <= tree_size:
        raise ProofRangeError("seq", f"between 1 and tree_size, {tree_size}")
    return InclusionProof(seq - 1, tree_size, inclusion_proof(seq - 1, tree_size, node_reader(tenant_id)))


def consistency(tenant_id: str, *, first: int, second: int | None = None) -> ConsistencyProof:
    """The proof that the tree of ``first`` leaves is a prefix of the one of ``second``.

    Raises :class:`ProofRangeError` naming the parameter out of range.
    """
    size = log_size(tenant_id)
    second = size if second is None else second
    if not 1 <= second <= size:
        raise ProofRangeError("second", f"between 1 and the log's size, {size}")
    if not 1 <= first <= second:
        raise ProofRangeError("first", f"between 1 and second, {second}")
    return ConsistencyProof(first, second, consistency_proof(first, second, node_reader(tenant_id)))
