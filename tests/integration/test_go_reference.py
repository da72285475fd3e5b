"""Go's reference code (sumdb/note, sumdb/tlog) accepts the engine's checkpoints and proofs,
and refuses them once tampered with.

A tree of event leaves is built as a log builds it (``new_nodes`` in batches); for several
sizes the engine signs a checkpoint and proves inclusion and consistency, and
``tests/interop/tlogcheck`` checks them in Go. Each refusal test first shows Go accepting
the untampered document, so a refusal is the tampering's and nothing else's.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from keelgate.audit import (
    Checkpoint,
    consistency_proof,
    format_checkpoint,
    inclusion_proof,
    leaf_bytes,
    leaf_hash,
    leaf_object,
    new_nodes,
    sign_note,
    tree_root,
    verifier_key,
)
from tests.interop.go_reference import Inclusion, document, go_check, tlogcheck

ORIGIN = "keelgate.example/audit/tenant-7"
NAME = "keelgate.example/audit"
KEY = Ed25519PrivateKey.from_private_bytes(b"\x11" * 32)
OTHER = Ed25519PrivateKey.from_private_bytes(b"\x22" * 32)
VKEY = str(verifier_key(NAME, KEY))
SIZES = [1, 2, 3, 5, 7, 8, 9, 16, 17, 63, 64, 65, 100, 255, 256, 257, 1000]


class Tree:
    """Stored complete-subtree hashes of event leaves, appended in random batches."""

    def __init__(self, size: int) -> None:
        self.stored: dict[tuple[int, int], bytes] = {}
        self.data = [self._leaf(index) for index in range(size)]
        self.leaves = [leaf_hash(data) for data in self.data]
        rng = random.Random(9162)
        done = 0
        while done < size:
            batch = self.leaves[done : done + rng.randint(1, 40)]
            made = new_nodes(done, batch, self.read)
            self.stored.update({(level, index): h for level, index, h in made})
            done += len(batch)

    @staticmethod
    def _leaf(index: int) -> bytes:
        body = {"run_id": f"run-{index // 6}", "step": index % 6, "note": "caf\u00e9 \u2014 \U0001f600"}
        return leaf_bytes(
            leaf_object(
                version=2,
                tenant_id="tenant-7",
                seq=index + 1,
                at=f"2026-12-04T09:30:{index % 60:02d}.000000+00:00",
                actor="agent:trader",
                kind="gateway.call",
                body=body,
            )
        )

    def read(self, nodes: Sequence[tuple[int, int]]) -> list[bytes]:
        return [self.stored[node] for node in nodes]

    def note(self, size: int, *, key: Ed25519PrivateKey = KEY, name: str = NAME) -> str:
        text = format_checkpoint(Checkpoint(ORIGIN, size, tree_root(size, self.read)))
        return sign_note(text, name, key)

    def inclusion(self, size: int, indexes: Iterable[int]) -> list[Inclusion]:
        """Each leaf's hash, proof and bytes (which Go hashes too)."""
        return [(i, self.leaves[i], inclusion_proof(i, size, self.read), self.data[i]) for i in indexes]

    def consistency(self, size: int, old_sizes: Iterable[int]) -> list[tuple[int, bytes, list[bytes]]]:
        return [(m, tree_root(m, self.read), consistency_proof(m, size, self.read)) for m in old_sizes]


TREE = Tree(max(SIZES))


@pytest.fixture(scope="session", autouse=True)
def _built() -> None:
    """Go and x/mod present (else skipped, or failed when CI=true), the checker built once."""
    tlogcheck()


def _indexes(size: int) -> list[int]:
    if size <= 17:
        return list(range(size))
    rng = random.Random(size)
    return sorted({0, 1, size // 2, size - 2, size - 1, *rng.sample(range(size), 8)})


def _old_sizes(size: int) -> list[int]:
    if size <= 17:
        return list(range(1, size + 1))
    powers = [1 << k for k in range(size.bit_length()) if 1 << k <= size]
    return sorted({1, 2, 3, size // 2, size - 1, size, *powers, *(p + 1 for p in powers if p < size)})


@pytest.mark.parametrize("size", SIZES)
def test_go_accepts_the_engines_checkpoint_and_proofs(size: int) -> None:
    """The signed checkpoint opens with note.Open; every inclusion and consistency proof passes
    tlog.CheckRecord and tlog.CheckTree against its size and root."""
    indexes, old_sizes = _indexes(size), _old_sizes(size)
    checked = go_check(
        document(
            key=VKEY,
            note=TREE.note(size),
            inclusion=TREE.inclusion(size, indexes),
            consistency=TREE.consistency(size, old_sizes),
        )
    )
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.splitlines() == [
        f"ok note: {ORIGIN}, size {size}, signed by {NAME}",
        *(f"ok inclusion of leaf {i} in {size}" for i in indexes),
        *(f"ok consistency of {m} with {size}" for m in old_sizes),
    ]


def _refused(doc: dict[str, Any], reason: str) -> None:
    checked = go_check(doc)
    assert checked.returncode == 1, checked.stdout
    assert checked.stderr.startswith("FAIL "), checked.stderr
    assert reason in checked.stderr, checked.stderr


def _good(size: int = 100, **parts: Any) -> dict[str, Any]:
    doc = document(
        key=VKEY,
        note=TREE.note(size),
        inclusion=TREE.inclusion(size, [37]),
        consistency=TREE.consistency(size, [60]),
    )
    assert go_check(doc).returncode == 0
    return {**doc, **parts}


def test_go_refuses_a_tampered_note() -> None:
    """A checkpoint whose size was edited after signing: note.Open finds the signature invalid."""
    doc = _good()
    _refused({**doc, "note": doc["note"].replace("\n100\n", "\n101\n", 1)}, "note: invalid signature for key")


def test_go_refuses_a_note_signed_by_another_key() -> None:
    """Another key under the same name, or under another name: note.Open finds no verifiable signature."""
    _good()
    _refused(_good(note=TREE.note(100, key=OTHER)), "note: note has no verifiable signatures")
    _refused(_good(note=TREE.note(100, key=OTHER, name="other.example")), "note has no verifiable signatures")


def test_go_refuses_a_control_character_in_a_signature_line() -> None:
    """A stranger's signature line holding a control character makes the note malformed, in Go as
    in keelgate.audit.open_note."""
    doc = _good()
    _refused({**doc, "note": doc["note"] + "\u2014 odd\x01name AAAAAAAA\n"}, "note: malformed note")


def test_go_refuses_a_wrong_leaf_hash() -> None:
    """Leaf 38 (its hash and bytes) with leaf 37's index and proof."""
    doc = _good()
    entry = doc["inclusion"][0]
    leaf_38 = document(key=VKEY, note="", inclusion=[(38, TREE.leaves[38], [], TREE.data[38])])["inclusion"][
        0
    ]
    wrong = {**entry, "leaf_hash": leaf_38["leaf_hash"], "leaf": leaf_38["leaf"]}
    _refused({**doc, "inclusion": [wrong]}, "inclusion of leaf 37 in 100")


def test_go_refuses_leaf_bytes_that_are_not_the_leafs() -> None:
    """Go hashes a leaf's bytes itself (SHA-256(0x00 || bytes)): leaf 38's bytes under leaf 37's hash."""
    doc = _good()
    entry = doc["inclusion"][0]
    other = document(key=VKEY, note="", inclusion=[(38, b"", [], TREE.data[38])])["inclusion"][0]["leaf"]
    _refused(
        {**doc, "inclusion": [{**entry, "leaf": other}]}, "leaf 37: its hash is not SHA-256(0x00 || leaf)"
    )


def test_go_refuses_a_wrong_index() -> None:
    """Leaf 37's hash and proof claimed at index 36, and at 38."""
    doc = _good()
    entry = doc["inclusion"][0]
    _refused({**doc, "inclusion": [{**entry, "index": 36}]}, "inclusion of leaf 36 in 100")
    _refused({**doc, "inclusion": [{**entry, "index": 38}]}, "inclusion of leaf 38 in 100")


def test_go_refuses_a_truncated_proof() -> None:
    """An inclusion or consistency proof missing its last hash, or its first."""
    doc = _good()
    inclusion, consistency = doc["inclusion"][0], doc["consistency"][0]
    for cut in (inclusion["hashes"][:-1], inclusion["hashes"][1:]):
        _refused({**doc, "inclusion": [{**inclusion, "hashes": cut}]}, "inclusion of leaf 37 in 100")
    for cut in (consistency["hashes"][:-1], consistency["hashes"][1:]):
        _refused({**doc, "consistency": [{**consistency, "hashes": cut}]}, "consistency of 60 with 100")


def test_go_refuses_a_consistency_proof_against_a_wrong_old_root() -> None:
    """The proof from 60 checked against the root of 59, and of 61."""
    doc = _good()
    entry = doc["consistency"][0]
    for other in (59, 61):
        root = document(key=VKEY, note="", consistency=[(other, tree_root(other, TREE.read), [])])
        wrong = root["consistency"][0]["old_root"]
        _refused({**doc, "consistency": [{**entry, "old_root": wrong}]}, "consistency of 60 with 100")


def test_go_refuses_proofs_against_another_checkpoint() -> None:
    """Proofs made for the tree of 100 do not pass against a signed checkpoint of 99."""
    doc = _good()
    _refused({**doc, "note": TREE.note(99)}, "inclusion of leaf 37 in 99")
    _refused({**doc, "note": TREE.note(99), "inclusion": []}, "consistency of 60 with 99")


def test_go_reads_a_checkpoint_with_extension_lines() -> None:
    """C2SP extension lines after the root are signed with it and do not change the proofs' check."""
    text = format_checkpoint(Checkpoint(ORIGIN, 100, tree_root(100, TREE.read), ("ext one", "\u2014 two")))
    checked = go_check(_good(note=sign_note(text, NAME, KEY)))
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.splitlines()[0] == f"ok note: {ORIGIN}, size 100, signed by {NAME}"
