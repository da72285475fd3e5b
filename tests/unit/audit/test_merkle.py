"""The engine's Merkle trees against RFC 6962's own recursive definitions, written naively here.

``mth``, ``path`` and ``subproof`` below are RFC 6962 §2.1's MTH, PATH and PROOF (RFC
9162 §2.1.1, §2.1.3.1, §2.1.4.1) over one fixed list of entries, hashing with hashlib
directly; ``path_root`` and ``subproof_roots`` recompute a root from a proof by the same
recursion (what Go's ``tlog.CheckRecord`` and ``tlog.CheckTree`` run). The engine's trees
are built the way a log builds them: leaf hashes appended in batches through
``new_nodes``, each complete subtree stored once under ``(level, index)``.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keelgate.audit import (
    EMPTY_ROOT,
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
    root_from_nodes,
    tree_root,
)

EXHAUSTIVE = 70
"""Every size, index and pair of sizes up to here is checked, every mutation of every proof."""
BIG = 3000
"""Hypothesis draws sizes up to here."""
ENTRIES = [f"entry {i}".encode() for i in range(BIG)]


def _sha(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _k(n: int) -> int:
    """The largest power of two smaller than n (n > 1)."""
    k = 1
    while k * 2 < n:
        k *= 2
    return k


@cache
def mth(lo: int, hi: int) -> bytes:
    """RFC 6962 MTH(D[lo:hi]) over ENTRIES."""
    if hi == lo:
        return _sha(b"")
    if hi - lo == 1:
        return _sha(b"\x00" + ENTRIES[lo])
    k = _k(hi - lo)
    return _sha(b"\x01" + mth(lo, lo + k) + mth(lo + k, hi))


def path(m: int, lo: int, hi: int) -> list[bytes]:
    """RFC 6962 PATH(m, D[lo:hi]), m relative to lo."""
    if hi - lo == 1:
        return []
    k = _k(hi - lo)
    if m < k:
        return [*path(m, lo, lo + k), mth(lo + k, hi)]
    return [*path(m - k, lo + k, hi), mth(lo, lo + k)]


def subproof(m: int, lo: int, hi: int, whole: bool) -> list[bytes]:
    """RFC 6962 SUBPROOF(m, D[lo:hi], b)."""
    if m == hi - lo:
        return [] if whole else [mth(lo, hi)]
    k = _k(hi - lo)
    if m <= k:
        return [*subproof(m, lo, lo + k, whole), mth(lo + k, hi)]
    return [*subproof(m - k, lo + k, hi, False), mth(lo, lo + k)]


def path_root(m: int, n: int, leaf: bytes, proof: Sequence[bytes]) -> bytes | None:
    """The root PATH's recursion rebuilds from ``proof`` for leaf m of n, or None if it cannot."""
    if n == 1:
        return leaf if not proof else None
    if not proof:
        return None
    k = _k(n)
    if m < k:
        below = path_root(m, k, leaf, proof[:-1])
        return None if below is None else _sha(b"\x01" + below + proof[-1])
    below = path_root(m - k, n - k, leaf, proof[:-1])
    return None if below is None else _sha(b"\x01" + proof[-1] + below)


def subproof_roots(
    m: int, n: int, old: bytes, proof: Sequence[bytes], whole: bool = True
) -> tuple[bytes, bytes] | None:
    """The (old, new) roots SUBPROOF's recursion rebuilds from ``proof``, or None if it cannot."""
    if m == n:
        if whole:
            return (old, old) if not proof else None
        return (proof[0], proof[0]) if len(proof) == 1 else None
    if not proof:
        return None
    k = _k(n)
    if m <= k:
        below = subproof_roots(m, k, old, proof[:-1], whole)
        return None if below is None else (below[0], _sha(b"\x01" + below[1] + proof[-1]))
    below = subproof_roots(m - k, n - k, old, proof[:-1], False)
    if below is None:
        return None
    return _sha(b"\x01" + proof[-1] + below[0]), _sha(b"\x01" + proof[-1] + below[1])


class Log:
    """A log's stored hashes: complete subtrees by ``(level, index)``, appended through new_nodes."""

    def __init__(self) -> None:
        self.stored: dict[tuple[int, int], bytes] = {}
        self.size = 0
        self.batches_read: list[list[tuple[int, int]]] = []

    def read(self, nodes: Sequence[tuple[int, int]]) -> list[bytes]:
        self.batches_read.append(list(nodes))
        return [self.stored[node] for node in nodes]

    def append(self, count: int) -> list[tuple[int, int, bytes]]:
        made = new_nodes(self.size, [leaf_hash(e) for e in ENTRIES[self.size : self.size + count]], self.read)
        for level, index, h in made:
            assert (level, index) not in self.stored, f"({level}, {index}) made twice"
            self.stored[(level, index)] = h
        self.size += count
        return made


def _built(size: int, seed: int) -> Log:
    log, rng = Log(), random.Random(seed)
    while log.size < size:
        log.append(min(rng.choice([1, 1, 2, 3, 5, 8, 13, 64]), size - log.size))
    return log


LOG = _built(BIG, seed=6962)
"""Every test reads this log's prefixes: the tree of n leaves is its first n."""


def _flip(h: bytes) -> bytes:
    return bytes([h[0] ^ 1]) + h[1:]


def _flipped(proof: Sequence[bytes], i: int) -> list[bytes]:
    """``proof`` with its i-th hash changed by one bit."""
    return [*proof[:i], _flip(proof[i]), *proof[i + 1 :]]


def _passes_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes], root: bytes) -> bool:
    try:
        check_inclusion(index, size, leaf, proof, root)
    except ProofError:
        return False
    return True


def _passes_consistency(m: int, n: int, old: bytes, new: bytes, proof: Sequence[bytes]) -> bool:
    try:
        check_consistency(m, n, old, new, proof)
    except ProofError:
        return False
    return True


# The eight entries of the certificate-transparency reference implementation's Merkle tree
# tests, which RFC 6962 implementations (Trillian, Go's, Rust's ct-merkle) check against.
CT_ENTRIES = [
    b"",
    b"\x00",
    b"\x10",
    b"\x20\x21",
    b"\x30\x31",
    b"\x40\x41\x42\x43",
    b"\x50\x51\x52\x53\x54\x55\x56\x57",
    b"\x60\x61\x62\x63\x64\x65\x66\x67\x68\x69\x6a\x6b\x6c\x6d\x6e\x6f",
]
CT_ROOTS = [
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]
CT_INCLUSION = {
    (0, 8): [
        "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
        "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
        "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
    ],
    (5, 8): [
        "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    ],
}
CT_CONSISTENCY = {
    (1, 8): [
        "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
        "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
        "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
    ],
    (6, 8): [
        "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
        "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    ],
    (2, 5): [
        "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
        "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
    ],
}


def test_the_reference_vectors() -> None:
    """The roots, audit paths and consistency proofs of certificate-transparency's eight entries."""
    stored: dict[tuple[int, int], bytes] = {}

    def read(nodes: Sequence[tuple[int, int]]) -> list[bytes]:
        return [stored[node] for node in nodes]

    for i, entry in enumerate(CT_ENTRIES):
        stored.update({(lvl, idx): h for lvl, idx, h in new_nodes(i, [leaf_hash(entry)], read)})
    assert [tree_root(n, read).hex() for n in range(9)] == CT_ROOTS
    for (index, size), expected in CT_INCLUSION.items():
        proof = inclusion_proof(index, size, read)
        assert [h.hex() for h in proof] == expected
        check_inclusion(index, size, leaf_hash(CT_ENTRIES[index]), proof, bytes.fromhex(CT_ROOTS[size]))
    for (first, second), expected in CT_CONSISTENCY.items():
        proof = consistency_proof(first, second, read)
        assert [h.hex() for h in proof] == expected
        old, new = bytes.fromhex(CT_ROOTS[first]), bytes.fromhex(CT_ROOTS[second])
        check_consistency(first, second, old, new, proof)


def test_hashes_are_domain_separated() -> None:
    """A leaf is SHA-256(0x00 || data), a node SHA-256(0x01 || left || right), the empty tree SHA-256('')."""
    assert leaf_hash(b"abc") == _sha(b"\x00abc")
    assert node_hash(b"L" * 32, b"R" * 32) == _sha(b"\x01" + b"L" * 32 + b"R" * 32)
    assert EMPTY_ROOT == _sha(b"") == tree_root(0, LOG.read)
    assert root_from_nodes([]) == EMPTY_ROOT


@settings(max_examples=60, deadline=None)
@given(batches=st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=25))
def test_appends_in_batches_store_every_complete_subtree_once(batches: list[int]) -> None:
    """Appending in any batches stores exactly the complete subtrees, each MTH of its range,
    reading in one batch only stored nodes left of the append."""
    log = Log()
    for count in batches:
        start = log.size
        log.batches_read.clear()
        made = log.append(count)
        assert len(log.batches_read) <= 1
        for level, index in log.batches_read[0] if log.batches_read else []:
            assert (index + 1) << level <= start, f"read ({level}, {index}), not stored before {start}"
        assert {(lvl, idx) for lvl, idx, _ in made} == {
            (lvl, idx) for lvl in range(12) for idx in range(log.size >> lvl) if (idx + 1) << lvl > start
        }
    size = log.size
    expected = {(lvl, idx) for lvl in range(12) for idx in range(size >> lvl)}
    assert set(log.stored) == expected
    for (lvl, idx), h in log.stored.items():
        assert h == mth(idx << lvl, (idx + 1) << lvl)


def test_a_tree_builder_grows_the_stored_tree() -> None:
    """Leaf by leaf to 600, TreeBuilder.add answers with new_nodes's subtrees and its root is MTH."""
    builder = TreeBuilder()
    assert (builder.size, builder.root()) == (0, EMPTY_ROOT)
    for i in range(600):
        leaf = leaf_hash(ENTRIES[i])
        assert builder.add(leaf) == new_nodes(i, [leaf], LOG.read), i
        assert (builder.size, builder.root()) == (i + 1, mth(0, i + 1)), i


def test_a_tree_builder_resumes_from_the_right_edge_of_any_size() -> None:
    """From the stored edge of every size up to EXHAUSTIVE (what a log keeps when it retires
    its first leaves), a builder adds the next leaves exactly as one that saw them all: the
    same subtrees completed, the same roots."""
    for cut in range(EXHAUSTIVE + 1):
        edge = LOG.read(range_nodes(0, cut))
        resumed = TreeBuilder.from_edge(cut, edge)
        assert (resumed.size, resumed.root()) == (cut, mth(0, cut) if cut else EMPTY_ROOT), cut
        for i in range(cut, cut + 40):
            leaf = leaf_hash(ENTRIES[i])
            assert resumed.add(leaf) == new_nodes(i, [leaf], LOG.read), (cut, i)
            assert resumed.root() == mth(0, i + 1), (cut, i)


@pytest.mark.parametrize(
    ("size", "edge"),
    [(5, [bytes(32)]), (4, [bytes(32), bytes(32)]), (3, [bytes(32), bytes(31)]), (0, [bytes(32)]), (-1, [])],
)
def test_a_tree_builder_refuses_an_edge_that_cannot_be(size: int, edge: list[bytes]) -> None:
    """An edge is one 32-byte hash per bit of the size: anything else is a ProofError."""
    with pytest.raises(ProofError):
        TreeBuilder.from_edge(size, edge)


def test_new_nodes_of_an_empty_batch_is_empty() -> None:
    """Appending nothing makes nothing and reads nothing."""
    log = _built(5, seed=1)
    log.batches_read.clear()
    assert new_nodes(5, [], log.read) == []
    assert log.batches_read == []


def test_the_root_of_every_size() -> None:
    """tree_root(n) is MTH(D[0:n]) for every size to EXHAUSTIVE, and at the powers of two and their
    neighbours beyond."""
    sizes = [*range(EXHAUSTIVE + 1), *(p + d for p in (128, 256, 512, 1024, 2048) for d in (-1, 0, 1))]
    for n in sizes:
        assert tree_root(n, LOG.read) == mth(0, n), n


def test_range_nodes_cover_every_reachable_range() -> None:
    """range_nodes(lo, hi) are complete subtrees, left to right, whose fold is MTH(D[lo:hi])."""
    for lo in range(EXHAUSTIVE):
        for hi in range(lo, EXHAUSTIVE + 1):
            width = 1 << max(hi - lo - 1, 0).bit_length()
            if lo % width:
                continue  # not a range RFC 6962's recursion reaches
            nodes = range_nodes(lo, hi)
            covered = [leaf for lvl, idx in nodes for leaf in range(idx << lvl, (idx + 1) << lvl)]
            assert covered == list(range(lo, hi))
            assert root_from_nodes(LOG.read(nodes)) == mth(lo, hi)


def test_every_inclusion_proof_is_rfc_path_and_checks() -> None:
    """For every size to EXHAUSTIVE and every leaf, the proof is PATH(m, D[n]) and it checks."""
    for n in range(1, EXHAUSTIVE + 1):
        root = tree_root(n, LOG.read)
        for m in range(n):
            proof = inclusion_proof(m, n, LOG.read)
            assert proof == path(m, 0, n), (m, n)
            check_inclusion(m, n, leaf_hash(ENTRIES[m]), proof, root)


def _inclusion_mutations(m: int, n: int) -> None:
    """Every mutation of leaf m's proof in the tree of n that must fail does; sizes agree with RFC."""
    leaf, root = leaf_hash(ENTRIES[m]), mth(0, n)
    proof = inclusion_proof(m, n, LOG.read)
    mutated_proofs = [
        *(_flipped(proof, i) for i in range(len(proof))),
        proof[:-1],
        proof[1:],
        [*proof, proof[-1] if proof else leaf],
        [leaf, *proof],
        proof[::-1] if len(set(proof)) > 1 else [*proof, root],
    ]
    for bad in mutated_proofs:
        if bad != proof:  # a one-hash proof reversed, say, is itself
            assert not _passes_inclusion(m, n, leaf, bad, root), (m, n, "proof", bad)
    assert not _passes_inclusion(m, n, _flip(leaf), proof, root), (m, n, "leaf")
    assert not _passes_inclusion(m, n, leaf_hash(ENTRIES[m + 1]), proof, root), (m, n, "another leaf")
    assert not _passes_inclusion(m, n, leaf, proof, _flip(root)), (m, n, "root")
    for other in range(n):
        if other != m:
            assert not _passes_inclusion(other, n, leaf, proof, root), (m, n, "index", other)
    for other in range(1, EXHAUSTIVE + 2):
        if other != n:
            # A root does not commit to its size: a size whose PATH has the very same shape
            # rebuilds the same root (the signed checkpoint binds the size). Whatever the
            # engine accepts, RFC 6962's recursion must rebuild, and nothing else.
            rfc = m < other and path_root(m, other, leaf, proof) == root
            assert _passes_inclusion(m, other, leaf, proof, root) == rfc, (m, n, "size", other)


def test_every_mutated_inclusion_proof_fails() -> None:
    """To EXHAUSTIVE: a changed, dropped, added or reordered hash, another leaf, another root, any
    other index fails; another size passes only where RFC 6962's recursion rebuilds the root."""
    for n in range(1, EXHAUSTIVE + 1):
        for m in range(n):
            _inclusion_mutations(m, n)


def test_a_size_with_the_same_path_shape_rebuilds_the_same_root() -> None:
    """Leaf 0's proof in the tree of 3 also checks as leaf 0 of 4 (the same two steps): the size is
    bound by the signed checkpoint, not by the root."""
    proof = inclusion_proof(0, 3, LOG.read)
    check_inclusion(0, 4, leaf_hash(ENTRIES[0]), proof, mth(0, 3))


def test_every_consistency_proof_is_rfc_proof_and_checks() -> None:
    """For every pair of sizes to EXHAUSTIVE, the proof is PROOF(m, D[n]) and it checks."""
    for n in range(1, EXHAUSTIVE + 1):
        for m in range(1, n + 1):
            proof = consistency_proof(m, n, LOG.read)
            assert proof == subproof(m, 0, n, True), (m, n)
            check_consistency(m, n, mth(0, m), mth(0, n), proof)


def _consistency_mutations(m: int, n: int) -> None:
    old, new = mth(0, m), mth(0, n)
    proof = consistency_proof(m, n, LOG.read)
    mutated_proofs = [
        *(_flipped(proof, i) for i in range(len(proof))),
        [*proof, new],
        [old, *proof],
    ]
    if proof:
        mutated_proofs += [proof[:-1], proof[1:]]
    if len(set(proof)) > 1:
        mutated_proofs.append(proof[::-1])
    for bad in mutated_proofs:
        assert bad != proof
        assert not _passes_consistency(m, n, old, new, bad), (m, n, "proof", bad)
    assert not _passes_consistency(m, n, _flip(old), new, proof), (m, n, "old root")
    assert not _passes_consistency(m, n, old, _flip(new), proof), (m, n, "new root")
    if m > 1:
        assert not _passes_consistency(m, n, mth(0, m - 1), new, proof), (m, n, "a smaller tree's root")
    for other in range(1, EXHAUSTIVE + 2):
        if other != m:
            # As for inclusion: whatever passes, RFC 6962's recursion must rebuild both roots.
            rfc = other <= n and subproof_roots(other, n, old, proof) == (old, new)
            assert _passes_consistency(other, n, old, new, proof) == rfc, (m, n, "old size", other)
        if other != n:
            rfc = m <= other and subproof_roots(m, other, old, proof) == (old, new)
            assert _passes_consistency(m, other, old, new, proof) == rfc, (m, n, "new size", other)


def test_every_mutated_consistency_proof_fails() -> None:
    """To EXHAUSTIVE: a changed, dropped, added or reordered hash, another old or new root fails;
    other sizes pass only where RFC 6962's recursion rebuilds both roots."""
    for n in range(1, EXHAUSTIVE + 1):
        for m in range(1, n + 1):
            _consistency_mutations(m, n)


@settings(max_examples=150, deadline=None)
@given(data=st.data(), n=st.integers(min_value=EXHAUSTIVE + 1, max_value=BIG))
def test_big_trees_prove_and_refuse_like_the_rfc(data: st.DataObject, n: int) -> None:
    """Beyond EXHAUSTIVE: random proofs are the RFC's and check; a random mutation fails."""
    root = tree_root(n, LOG.read)
    assert root == mth(0, n)
    m = data.draw(st.integers(min_value=0, max_value=n - 1), label="index")
    proof = inclusion_proof(m, n, LOG.read)
    assert proof == path(m, 0, n)
    leaf = leaf_hash(ENTRIES[m])
    check_inclusion(m, n, leaf, proof, root)
    i = data.draw(st.integers(min_value=0, max_value=len(proof) - 1), label="flipped hash")
    assert not _passes_inclusion(m, n, leaf, _flipped(proof, i), root)
    other = data.draw(st.integers(min_value=0, max_value=n - 1).filter(lambda x: x != m), label="other index")
    assert not _passes_inclusion(other, n, leaf, proof, root)

    first = data.draw(st.integers(min_value=1, max_value=n), label="first")
    proof = consistency_proof(first, n, LOG.read)
    assert proof == subproof(first, 0, n, True)
    check_consistency(first, n, mth(0, first), root, proof)
    if proof:
        i = data.draw(st.integers(min_value=0, max_value=len(proof) - 1), label="flipped hash")
        bad = _flipped(proof, i)
        assert not _passes_consistency(first, n, mth(0, first), root, bad)
        assert not _passes_consistency(first, n, mth(0, first), root, proof[:-1])
    if first > 1:
        assert not _passes_consistency(first, n, mth(0, first - 1), root, proof)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: tree_root(-1, LOG.read), "tree size is negative"),
        (lambda: inclusion_proof(-1, 5, LOG.read), "leaf -1 is not in a tree of 5"),
        (lambda: inclusion_proof(5, 5, LOG.read), "leaf 5 is not in a tree of 5"),
        (lambda: inclusion_proof(0, 0, LOG.read), "leaf 0 is not in a tree of 0"),
        (lambda: consistency_proof(0, 5, LOG.read), "no consistency proof from 0 to 5"),
        (lambda: consistency_proof(6, 5, LOG.read), "no consistency proof from 6 to 5"),
        (lambda: check_inclusion(5, 5, b"x" * 32, [], b"x" * 32), "leaf 5 is not in a tree of 5"),
        (lambda: check_inclusion(-1, 5, b"x" * 32, [], b"x" * 32), "leaf -1 is not in a tree of 5"),
        (lambda: check_consistency(0, 5, EMPTY_ROOT, mth(0, 5), []), "no consistency proof from 0 to 5"),
        (lambda: check_consistency(6, 5, mth(0, 6), mth(0, 5), []), "no consistency proof from 6 to 5"),
        (lambda: check_consistency(3, 5, mth(0, 3), mth(0, 5), []), "consistency proof is empty"),
        (
            lambda: check_consistency(5, 5, mth(0, 5), mth(0, 5), [mth(0, 5)]),
            "consistency proof between equal sizes must be empty",
        ),
        (lambda: check_consistency(5, 5, mth(0, 5), mth(0, 4), []), "two different roots for one tree size"),
    ],
)
def test_impossible_sizes_and_indexes_are_refused(call: object, message: str) -> None:
    """An index outside the tree, a negative size, an impossible pair of sizes: ProofError, saying so."""
    with pytest.raises(ProofError, match=message):
        call()  # type: ignore[operator]


def test_a_refused_proof_says_why() -> None:
    """A hash too many, a hash too few, a wrong hash: each refusal names its reason."""
    leaf, root = leaf_hash(ENTRIES[5]), mth(0, 13)
    proof = inclusion_proof(5, 13, LOG.read)
    with pytest.raises(ProofError, match="inclusion proof is too long"):
        check_inclusion(5, 13, leaf, [*proof, root], root)
    with pytest.raises(ProofError, match="inclusion proof is too short"):
        check_inclusion(5, 13, leaf, proof[:-1], root)
    with pytest.raises(ProofError, match="inclusion proof does not lead to the root"):
        check_inclusion(5, 13, leaf, [_flip(proof[0]), *proof[1:]], root)
    old = mth(0, 6)
    proof = consistency_proof(6, 13, LOG.read)
    with pytest.raises(ProofError, match="consistency proof is too long"):
        check_consistency(6, 13, old, root, [*proof, root])
    with pytest.raises(ProofError, match="consistency proof is too short"):
        check_consistency(6, 13, old, root, proof[:-1])
    with pytest.raises(ProofError, match="consistency proof does not lead to the first root"):
        check_consistency(6, 13, _flip(old), root, proof)
    with pytest.raises(ProofError, match="consistency proof does not lead to the second root"):
        check_consistency(6, 13, old, _flip(root), proof)


def test_equal_sizes_need_no_proof() -> None:
    """A tree is consistent with itself by an empty proof and equal roots."""
    assert consistency_proof(7, 7, LOG.read) == []
    check_consistency(7, 7, mth(0, 7), mth(0, 7), [])
