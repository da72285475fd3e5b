"""RFC 6962 / RFC 9162 Merkle trees: leaf and node hashes, proofs, and their checks.

A log stores the hash of every *complete* subtree once it exists: level 0 holds the
leaf hashes, and the node ``(level, index)`` covers leaves ``[index * 2**level,
(index + 1) * 2**level)``. Every hash a proof or a root needs, at any tree size up to
the log's, is built from O(log n) of those (as Go's ``golang.org/x/mod/sumdb/tlog``
does), so a store reads them in one batch through a :data:`HashReader`.

Proofs are lists of hashes in RFC 9162 order (the sibling nearest the leaf first);
:func:`check_inclusion` and :func:`check_consistency` are RFC 9162 §2.1.3.2 and §2.1.4.2
verbatim, so a proof that passes here passes Go's ``tlog.CheckRecord`` and
``tlog.CheckTree`` and the other way round.

A range proof (:func:`range_proof`, which RFC 9162 does not define) is what the root
needs besides a run of consecutive leaves, so a bundle of events proves itself against a
signed root: the hashes of the subtrees of MTH's recursion that hold none of them, left
to right.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence

__all__ = [
    "EMPTY_ROOT",
    "HashReader",
    "ProofError",
    "TreeBuilder",
    "check_consistency",
    "check_inclusion",
    "consistency_proof",
    "inclusion_proof",
    "leaf_hash",
    "new_nodes",
    "node_hash",
    "range_nodes",
    "range_proof",
    "root_from_nodes",
    "root_from_range",
    "tree_root",
]

HashReader = Callable[[Sequence[tuple[int, int]]], Sequence[bytes]]
"""Reads stored complete-subtree hashes, ``(level, index)`` in, hashes out in that order."""

EMPTY_ROOT = hashlib.sha256(b"").digest()
"""The root of the empty tree (RFC 6962 §2.1: the hash of the empty string)."""


class ProofError(ValueError):
    """A proof, a tree size or an index that cannot be right."""


def leaf_hash(data: bytes) -> bytes:
    """``SHA-256(0x00 || data)``: one leaf."""
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """``SHA-256(0x01 || left || right)``: one interior node."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two smaller than ``n`` (n > 1): where RFC 6962 splits a tree."""
    return 1 << ((n - 1).bit_length() - 1)


def range_nodes(lo: int, hi: int) -> list[tuple[int, int]]:
    """The complete subtrees whose hashes make ``MTH(D[lo:hi])``, left to right.

    ``[lo, hi)`` must be a range RFC 6962's recursion reaches (``lo`` a multiple of a
    power of two at least ``hi - lo``), as every range of a root or a proof is.
    """
    nodes: list[tuple[int, int]] = []
    while lo < hi:
        level = (hi - lo).bit_length() - 1
        nodes.append((level, lo >> level))
        lo += 1 << level
    return nodes


def root_from_nodes(hashes: Sequence[bytes]) -> bytes:
    """``MTH`` of a range from :func:`range_nodes`' hashes: folded from the right."""
    if not hashes:
        return EMPTY_ROOT
    root = hashes[-1]
    for left in reversed(hashes[:-1]):
        root = node_hash(left, root)
    return root


class TreeBuilder:
    """A tree grown one leaf at a time, keeping only its O(log n) complete right edge.

    For walking a whole log (verifying it, exporting it) without a store: ``add``
    answers with the complete subtrees each leaf completes, ``root`` is the current root.
    :meth:`from_edge` starts one part way, from the hashes a log keeps when it retires
    its oldest leaves.
    """

    def __init__(self) -> None:
        self.size = 0
        self._edge: list[tuple[int, bytes]] = []  # (level, hash), levels strictly decreasing

    @classmethod
    def from_edge(cls, size: int, edge: Sequence[bytes]) -> TreeBuilder:
        """A builder that already holds ``size`` leaves, given only their right edge: the
        hashes of :func:`range_nodes` ``(0, size)``, left to right (one per bit set in
        ``size``, the largest subtree first).

        What a log that retired its first ``size`` leaves but kept its subtree hashes walks
        on from: every leaf added after answers, and roots, exactly as if all ``size``
        leaves had been added. Nothing here checks the edge against leaves (they are gone);
        a signed root at or after ``size`` does. Raises :class:`ProofError` for an edge of
        the wrong length or a hash that is not 32 bytes.
        """
        if size < 0:
            raise ProofError("tree size is negative")
        nodes = range_nodes(0, size)
        if len(edge) != len(nodes) or any(len(h) != 32 for h in edge):
            raise ProofError(f"a tree of {size} has an edge of {len(nodes)} hashes, not {len(edge)}")
        builder = cls()
        builder.size = size
        builder._edge = [(level, bytes(h)) for (level, _), h in zip(nodes, edge, strict=True)]
        return builder

    def add(self, leaf: bytes) -> list[tuple[int, int, bytes]]:
        """Append one leaf hash; the ``(level, index, hash)`` of every subtree it completes."""
        index, h, level = self.size, leaf, 0
        made = [(0, index, h)]
        while self._edge and self._edge[-1][0] == level:
            _, left = self._edge.pop()
            h = node_hash(left, h)
            level += 1
            made.append((level, index >> level, h))
        self._edge.append((level, h))
        self.size += 1
        return made

    def root(self) -> bytes:
        """The root of the leaves added so far."""
        return root_from_nodes([h for _, h in self._edge])


def _ranges_hashes(ranges: Sequence[tuple[int, int]], read: HashReader) -> list[bytes]:
    """``MTH`` of each range, reading every stored hash they need in one batch."""
    plans = [range_nodes(lo, hi) for lo, hi in ranges]
    wanted = sorted({node for plan in plans for node in plan})
    found = dict(zip(wanted, read(wanted), strict=True))
    return [root_from_nodes([found[node] for node in plan]) for plan in plans]


def tree_root(size: int, read: HashReader) -> bytes:
    """The root of the first ``size`` leaves."""
    if size < 0:
        raise ProofError("tree size is negative")
    return _ranges_hashes([(0, size)], read)[0] if size else EMPTY_ROOT


def _path_ranges(index: int, lo: int, hi: int) -> list[tuple[int, int]]:
    # RFC 9162 §2.1.3.1 PATH(m, D[lo:hi]), as the ranges whose MTHs it lists.
    ranges: list[tuple[int, int]] = []
    while hi - lo > 1:
        k = _split(hi - lo)
        if index < lo + k:
            ranges.append((lo + k, hi))
            hi = lo + k
        else:
            ranges.append((lo, lo + k))
            lo = lo + k
    ranges.reverse()  # the recursion appends on the way back up: the deepest first
    return ranges


def inclusion_proof(index: int, size: int, read: HashReader) -> list[bytes]:
    """The audit path of leaf ``index`` in the tree of ``size`` leaves (RFC 9162 order)."""
    if not 0 <= index < size:
        raise ProofError(f"leaf {index} is not in a tree of {size}")
    return _ranges_hashes(_path_ranges(index, 0, size), read)


def _subproof_ranges(m: int, lo: int, hi: int, whole: bool) -> list[tuple[int, int]]:
    # RFC 9162 §2.1.4.1 SUBPROOF(m, D[lo:hi], b), as ranges, in the proof's order.
    if m == hi - lo:
        return [] if whole else [(lo, hi)]
    k = _split(hi - lo)
    if m <= k:
        return [*_subproof_ranges(m, lo, lo + k, whole), (lo + k, hi)]
    return [*_subproof_ranges(m - k, lo + k, hi, False), (lo, lo + k)]


def consistency_proof(first: int, second: int, read: HashReader) -> list[bytes]:
    """The proof that the tree of ``first`` leaves is a prefix of the tree of ``second``."""
    if not 0 < first <= second:
        raise ProofError(f"no consistency proof from {first} to {second}")
    return _ranges_hashes(_subproof_ranges(first, 0, second, True), read)


def check_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes], root: bytes) -> None:
    """Return only if ``proof`` shows the leaf hash ``leaf`` at ``index`` under ``root``.

    RFC 9162 §2.1.3.2. Raises :class:`ProofError`.
    """
    if not 0 <= index < size:
        raise ProofError(f"leaf {index} is not in a tree of {size}")
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            raise ProofError("inclusion proof is too long")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("inclusion proof is too short")
    if r != root:
        raise ProofError("inclusion proof does not lead to the root")


def check_consistency(
    first: int, second: int, first_root: bytes, second_root: bytes, proof: Sequence[bytes]
) -> None:
    """Return only if ``proof`` shows the tree ``(first, first_root)`` is a prefix of
    ``(second, second_root)``.

    RFC 9162 §2.1.4.2, with its two trivial cases: equal sizes need an empty proof and
    equal roots. Raises :class:`ProofError`.
    """
    if not 0 < first <= second:
        raise ProofError(f"no consistency proof from {first} to {second}")
    if first == second:
        if proof:
            raise ProofError("consistency proof between equal sizes must be empty")
        if first_root != second_root:
            raise ProofError("two different roots for one tree size")
        return
    path = list(proof)
    if not path:
        raise ProofError("consistency proof is empty")
    if first & (first - 1) == 0:  # an exact power of two: its root starts the path
        path.insert(0, first_root)
    fn, sn = first - 1, second - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ProofError("consistency proof is too long")
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("consistency proof is too short")
    if fr != first_root:
        raise ProofError("consistency proof does not lead to the first root")
    if sr != second_root:
        raise ProofError("consistency proof does not lead to the second root")


def _range_root(
    lo: int,
    hi: int,
    start: int,
    end: int,
    outside: Callable[[int, int], bytes],
    inside: Callable[[int, int], bytes],
) -> bytes:
    """RFC 6962's ``MTH(D[start:end])``, cut where it meets the leaves ``[lo, hi)``.

    A subtree disjoint from ``[lo, hi)`` is ``outside(start, end)`` (a hash a proof
    carries), one inside it ``inside(start, end)`` (hashed from the leaves); one
    overlapping it in part is split at the largest power of two below its size, as MTH
    splits it. Subtrees are visited left to right, depth first: the proof's order.
    """
    if end <= lo or start >= hi:
        return outside(start, end)
    if lo <= start and end <= hi:
        return inside(start, end)
    k = _split(end - start)
    left = _range_root(lo, hi, start, start + k, outside, inside)
    return node_hash(left, _range_root(lo, hi, start + k, end, outside, inside))


def _check_range(lo: int, hi: int, size: int) -> None:
    if not 0 <= lo < hi <= size:
        raise ProofError(f"leaves [{lo}, {hi}) are not a range of a tree of {size}")


def range_proof(lo: int, hi: int, size: int, read: HashReader) -> list[bytes]:
    """What the root of ``size`` leaves needs besides the leaves ``[lo, hi)``.

    The hashes of the subtrees of RFC 6962's recursion that hold none of those leaves,
    left to right, read in one batch; :func:`root_from_range` rebuilds the root from
    them and the range's leaf hashes. The whole tree needs none.
    """
    _check_range(lo, hi, size)
    ranges: list[tuple[int, int]] = []

    def outside(start: int, end: int) -> bytes:
        ranges.append((start, end))
        return EMPTY_ROOT  # a stand-in: only the ranges are wanted here

    _range_root(lo, hi, 0, size, outside, lambda start, end: EMPTY_ROOT)
    return _ranges_hashes(ranges, read) if ranges else []


def _mth(hashes: Sequence[bytes]) -> bytes:
    # MTH of a run of leaf hashes, bottom up: each level paired left to right, an odd
    # last hash moving up unchanged, which builds the tree RFC 6962's split builds.
    level = list(hashes)
    while len(level) > 1:
        paired = [node_hash(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) & 1:
            paired.append(level[-1])
        level = paired
    return level[0]


def root_from_range(
    lo: int, hi: int, size: int, leaf_hashes: Sequence[bytes], proof: Sequence[bytes]
) -> bytes:
    """The root of ``size`` leaves from the hashes of leaves ``[lo, hi)`` and their
    :func:`range_proof`.

    Compare it with a signed root: only the right leaves in the right places, with the
    right proof, give it. Raises :class:`ProofError` for a leaf count or a proof length
    that does not fit the range.
    """
    _check_range(lo, hi, size)
    if len(leaf_hashes) != hi - lo:
        raise ProofError(f"{len(leaf_hashes)} leaf hashes for the {hi - lo} leaves [{lo}, {hi})")
    given = iter(proof)

    def outside(start: int, end: int) -> bytes:
        found = next(given, None)
        if found is None:
            raise ProofError("range proof is too short")
        return found

    root = _range_root(lo, hi, 0, size, outside, lambda start, end: _mth(leaf_hashes[start - lo : end - lo]))
    if next(given, None) is not None:
        raise ProofError("range proof is too long")
    return root


def new_nodes(start: int, leaves: Iterable[bytes], read: HashReader) -> list[tuple[int, int, bytes]]:
    """The complete subtrees that appending ``leaves`` (leaf hashes) at index ``start``
    completes, as ``(level, index, hash)``: what a log stores for them, leaves included.

    Reads the stored left siblings it needs (those left of ``start``) in one batch.
    """
    batch = list(leaves)
    if not batch:
        return []
    end = start + len(batch)
    # The left siblings stored before the batch: those whose leaves all lie left of start.
    outside: list[tuple[int, int]] = []
    for i in range(start, end):
        lvl = 0
        while i & 1:
            if i << lvl <= start:
                outside.append((lvl, i - 1))
            lvl += 1
            i >>= 1
    known: dict[tuple[int, int], bytes] = dict(zip(outside, read(outside), strict=True)) if outside else {}
    made: list[tuple[int, int, bytes]] = []
    for offset, h in enumerate(batch):
        i, lvl = start + offset, 0
        known[(0, i)] = h
        made.append((0, i, h))
        while i & 1:
            h = node_hash(known[(lvl, i - 1)], h)
            lvl += 1
            i >>= 1
            known[(lvl, i)] = h
            made.append((lvl, i, h))
    return made
