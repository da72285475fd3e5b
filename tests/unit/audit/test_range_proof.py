"""Range proofs: the root of a tree from a run of its leaves and the hashes of the rest."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keelgate.audit import (
    HashReader,
    ProofError,
    leaf_hash,
    new_nodes,
    node_hash,
    range_proof,
    root_from_range,
    tree_root,
)


def _leaves(size: int, salt: int = 0) -> list[bytes]:
    return [leaf_hash(f"{salt}:{i}".encode()) for i in range(size)]


class Store:
    """The complete subtrees of a tree, as a log stores them, and the batches read from it."""

    def __init__(self, leaves: list[bytes], batch: int = 7) -> None:
        self.nodes: dict[tuple[int, int], bytes] = {}
        self.reads: list[list[tuple[int, int]]] = []
        for start in range(0, len(leaves), batch):  # appended in batches, as a log grows
            for level, index, h in new_nodes(start, leaves[start : start + batch], self._read):
                self.nodes[(level, index)] = h

    def _read(self, wanted):
        return [self.nodes[node] for node in wanted]  # KeyError: a subtree that is not complete

    @property
    def read(self) -> HashReader:
        def read(wanted):
            self.reads.append(list(wanted))
            return self._read(wanted)

        return read


@st.composite
def ranges(draw: st.DrawFn) -> tuple[int, int, int]:
    size = draw(st.integers(1, 300))
    lo = draw(st.integers(0, size - 1))
    hi = draw(st.integers(lo + 1, size))
    return size, lo, hi


@given(ranges())
def test_the_leaves_and_their_proof_give_the_tree_root(case):
    """For any size and range, root_from_range over range_proof is tree_root, read in one batch."""
    size, lo, hi = case
    leaves = _leaves(size)
    store = Store(leaves)
    proof = range_proof(lo, hi, size, store.read)
    assert len(store.reads) == (1 if proof else 0)
    assert root_from_range(lo, hi, size, leaves[lo:hi], proof) == tree_root(size, store.read)


@given(ranges(), st.data())
def test_any_changed_missing_or_extra_hash_or_leaf_fails(case, data):
    """A changed proof hash or leaf gives another root; a hash or leaf too many or too few raises."""
    size, lo, hi = case
    leaves = _leaves(size)
    store = Store(leaves)
    root = tree_root(size, store.read)
    proof = range_proof(lo, hi, size, store.read)
    mine = leaves[lo:hi]
    if proof:
        i = data.draw(st.integers(0, len(proof) - 1))
        changed = [*proof[:i], node_hash(proof[i], proof[i]), *proof[i + 1 :]]
        assert root_from_range(lo, hi, size, mine, changed) != root
        with pytest.raises(ProofError, match="too short"):
            root_from_range(lo, hi, size, mine, proof[:i] + proof[i + 1 :])
    with pytest.raises(ProofError, match="too long"):
        root_from_range(lo, hi, size, mine, [*proof, root])
    j = data.draw(st.integers(0, len(mine) - 1))
    other = [*mine[:j], leaf_hash(b"edited"), *mine[j + 1 :]]
    assert root_from_range(lo, hi, size, other, proof) != root
    with pytest.raises(ProofError, match="leaf hashes"):
        root_from_range(lo, hi, size, mine[:j] + mine[j + 1 :], proof)
    with pytest.raises(ProofError, match="leaf hashes"):
        root_from_range(lo, hi, size, [*mine, leaf_hash(b"extra")], proof)


@given(ranges(), st.data())
def test_two_leaves_swapped_give_another_root(case, data):
    """The same leaves in another order do not give the root: a moved leaf is found."""
    size, lo, hi = case
    if hi - lo < 2:
        return
    leaves = _leaves(size)
    store = Store(leaves)
    i, j = sorted(data.draw(st.lists(st.integers(lo, hi - 1), min_size=2, max_size=2, unique=True)))
    swapped = list(leaves[lo:hi])
    swapped[i - lo], swapped[j - lo] = swapped[j - lo], swapped[i - lo]
    proof = range_proof(lo, hi, size, store.read)
    assert root_from_range(lo, hi, size, swapped, proof) != tree_root(size, store.read)


def test_the_proof_is_the_subtrees_outside_the_range_left_to_right():
    """Size 8, leaf 2 alone: MTH(0..2), leaf 3, MTH(4..8), in that order; the whole tree needs none."""
    leaves = _leaves(8)
    store = Store(leaves)
    read = store.read
    assert range_proof(2, 3, 8, read) == [
        node_hash(leaves[0], leaves[1]),
        leaves[3],
        _mth(leaves[4:8]),
    ]
    assert range_proof(0, 8, 8, read) == []
    assert range_proof(0, 5, 5, read) == []


def _mth(hashes: list[bytes]) -> bytes:
    """RFC 6962's MTH written as the RFC writes it (split at the largest power of two below n)."""
    if len(hashes) == 1:
        return hashes[0]
    k = 1 << ((len(hashes) - 1).bit_length() - 1)
    return node_hash(_mth(hashes[:k]), _mth(hashes[k:]))


@given(ranges())
def test_the_root_from_the_leaves_is_rfc_6962s_mth(case):
    """The whole range and its empty proof give MTH computed the RFC's way, for any size."""
    size, _, _ = case
    leaves = _leaves(size, salt=1)
    assert root_from_range(0, size, size, leaves, []) == _mth(leaves)


@pytest.mark.parametrize(("lo", "hi", "size"), [(3, 3, 5), (4, 3, 5), (-1, 2, 5), (0, 6, 5), (0, 1, 0)])
def test_a_range_outside_the_tree_is_refused(lo, hi, size):
    """An empty, reversed, negative or too-long range raises ProofError, for a proof and a root."""
    store = Store(_leaves(5))
    with pytest.raises(ProofError, match="not a range"):
        range_proof(lo, hi, size, store.read)
    with pytest.raises(ProofError, match="not a range"):
        root_from_range(lo, hi, size, [], [])
