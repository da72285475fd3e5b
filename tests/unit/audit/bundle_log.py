"""A tenant's log built with the engine alone and signed with a fresh Ed25519 key, and the
bad bundles an auditor must catch: what the bundle's tests and the command's share."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from keelgate.audit import (
    GENESIS_HASH,
    AuditEvent,
    Checkpoint,
    build_bundle,
    format_at,
    format_checkpoint,
    leaf_object,
    new_nodes,
    object_leaf_hash,
    range_proof,
    sign_note,
    tree_root,
    verifier_key,
)

TENANT = "acme"
ORIGIN = "audit.keelgate.test/acme"
AT = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


class Log:
    """One tenant's leaves and the complete subtrees a store keeps of them."""

    def __init__(self, tenant: str = TENANT, origin: str = ORIGIN, *, salt: str = "") -> None:
        self.tenant, self.origin, self.salt = tenant, origin, salt
        self.key = Ed25519PrivateKey.generate()
        self.vkey = verifier_key(origin, self.key)
        self.leaves: list[dict[str, Any]] = []
        self.nodes: dict[tuple[int, int], bytes] = {}

    def read(self, wanted: Sequence[tuple[int, int]]) -> list[bytes]:
        return [self.nodes[node] for node in wanted]

    def append(self, count: int, *, version: int = 2) -> Log:
        """``count`` more events; ``version`` 1 ones hash-chained, as before the cut-over."""
        for _ in range(count):
            seq = len(self.leaves) + 1
            at = AT + timedelta(seconds=seq, microseconds=seq)
            body = {"n": seq, "who": f"Zoë {self.salt}", "items": [1, 2.5, None, True, {"b": "x", "a": []}]}
            if version == 1:
                prev = self.leaves[-1]["hash"] if self.leaves else GENESIS_HASH
                event = AuditEvent.build(self.tenant, seq, at, "alice", "run.status", body, prev)
                leaf = leaf_object(
                    version=1,
                    tenant_id=self.tenant,
                    seq=seq,
                    at=format_at(event.at),
                    actor=event.actor,
                    kind=event.kind,
                    body=event.body,
                    prev_hash=event.prev_hash,
                    hash=event.hash,
                )
            else:
                leaf = leaf_object(
                    version=2,
                    tenant_id=self.tenant,
                    seq=seq,
                    at=format_at(at),
                    actor="agent:trader",
                    kind="tool.call",
                    body=body,
                )
            for level, index, h in new_nodes(seq - 1, [object_leaf_hash(leaf)], self.read):
                self.nodes[(level, index)] = h
            self.leaves.append(leaf)
        return self

    def note(
        self,
        size: int | None = None,
        *,
        origin: str | None = None,
        key: Ed25519PrivateKey | None = None,
        name: str | None = None,
    ) -> str:
        """The signed checkpoint of the first ``size`` leaves (all by default)."""
        size = len(self.leaves) if size is None else size
        text = format_checkpoint(Checkpoint(origin or self.origin, size, tree_root(size, self.read)))
        return sign_note(text, name or self.origin, key or self.key)

    def bundle(
        self,
        from_seq: int = 1,
        to_seq: int | None = None,
        *,
        size: int | None = None,
        consistency_from: Iterable[int] = (),
        stated: bool = False,
    ) -> dict[str, Any]:
        """The bundle of ``from_seq..to_seq`` under the checkpoint of ``size`` (all by
        default); ``stated``: with the events' leaf hashes, as the product exports it."""
        size = len(self.leaves) if size is None else size
        events = self.leaves[from_seq - 1 : size if to_seq is None else to_seq]
        return build_bundle(
            tenant_id=self.tenant,
            origin=self.origin,
            vkey=self.vkey,
            note=self.note(size),
            events=events,
            read=self.read,
            consistency_from=consistency_from,
            leaf_hashes=[object_leaf_hash(e) for e in events] if stated else None,
        )


def dumps(bundle: Any) -> str:
    """A bundle's JSON, compact, UTF-8 as is: one changed byte is one changed character."""
    return json.dumps(bundle, ensure_ascii=False, separators=(",", ":"))


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def mixed_log() -> Log:
    """Seq 1..5 hash-chained (written before the cut-over), 6..12 tree leaves only."""
    return Log().append(5, version=1).append(7)


@dataclass
class Case:
    """A bad bundle: made from a fresh log, with the command's extra arguments; what must be said."""

    name: str
    make: Callable[[Log], Any]  # the bundle (an object, or text as written to the file)
    reason: str
    seq: int | None
    message: str  # in the command's ``FAIL:`` line
    vkey: Callable[[Log], str] | None = None  # --vkey
    previous: Callable[[Log], str] | None = None  # --previous (the note's text)


def _edit(bundle: dict[str, Any], change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    change(bundle)
    return bundle


def _event(seq: int, change: Callable[[dict[str, Any]], None]) -> Callable[[Log], dict[str, Any]]:
    """The whole log's bundle with event ``seq`` changed."""
    return lambda log: _edit(log.bundle(), lambda b: change(b["events"][seq - 1]))


def _restate(b: dict[str, Any], seq: int, **change: Any) -> None:
    """Event ``seq`` changed, and its stated leaf hash with it: only the root can tell."""
    b["events"][seq - 1].update(change)
    b["leaf_hashes"][seq - 1] = b64(object_leaf_hash(b["events"][seq - 1]))


def _swap(b: dict[str, Any], i: int, j: int) -> None:
    b["events"][i], b["events"][j] = b["events"][j], b["events"][i]


def _swap_renumbered(b: dict[str, Any], i: int, j: int) -> None:
    """Two events swapped and each given the other's seq: only the root can tell."""
    _swap(b, i, j)
    b["events"][i]["seq"], b["events"][j]["seq"] = b["events"][j]["seq"], b["events"][i]["seq"]


def _drop(b: dict[str, Any], seq: int) -> None:
    del b["events"][seq - 1]


def _drop_renumbered(log: Log, seq: int) -> dict[str, Any]:
    """Event ``seq`` removed, the gap closed up, to_seq adjusted and the range proof that
    range needs taken from the real tree: only the root can tell."""
    b = log.bundle()
    _drop(b, seq)
    for event in b["events"][seq - 1 :]:
        event["seq"] -= 1
    b["to_seq"] -= 1
    b["range_proof"] = [b64(h) for h in range_proof(0, b["to_seq"], len(log.leaves), log.read)]
    return b


def _drop_last(b: dict[str, Any], count: int) -> None:
    del b["events"][-count:]
    b["to_seq"] -= count


def _resign(log: Log, b: dict[str, Any], **note: Any) -> dict[str, Any]:
    b["checkpoint"] = log.note(**note)
    return b


def _other_key_bundle(log: Log) -> dict[str, Any]:
    """A whole bundle forged under another key of the same name, carrying that key."""
    other = Ed25519PrivateKey.generate()
    b = _resign(log, log.bundle(), key=other)
    b["vkey"] = str(verifier_key(log.origin, other))
    return b


def _edited_signature(log: Log) -> dict[str, Any]:
    b = log.bundle()
    text, _, signature = b["checkpoint"].rpartition(" ")
    raw = bytearray(base64.b64decode(signature))
    raw[10] ^= 1
    b["checkpoint"] = f"{text} {b64(bytes(raw))}\n"
    return b


def _rewritten_log_note(log: Log, size: int) -> str:
    """A checkpoint of ``size`` under the same origin and key, over other events."""
    other = Log(salt="rewritten").append(size)
    other.key = log.key
    return other.note(size)


CASES = [
    Case("malformed JSON", lambda log: dumps(log.bundle())[:-40], "malformed", None, "not JSON"),
    Case(
        "wrong format",
        lambda log: {**log.bundle(), "format": "keelgate-audit-bundle/2"},
        "format",
        None,
        "the format is 'keelgate-audit-bundle/2', not 'keelgate-audit-bundle/1'",
    ),
    Case(
        "unknown field",
        lambda log: {**log.bundle(), "signatures": []},
        "shape",
        None,
        "fields missing [], unknown ['signatures']",
    ),
    Case(
        "leaf hashes not one per event",
        lambda log: _edit(log.bundle(stated=True), lambda b: b["leaf_hashes"].pop()),
        "shape",
        None,
        "leaf_hashes is not one hash per event",
    ),
    Case(
        "one changed byte, the leaf hashes stated",
        lambda log: _edit(log.bundle(stated=True), lambda b: b["events"][8].update(actor="agent:traded")),
        "leaf_mismatch",
        9,
        "seq 9: the event is not the leaf the signed tree holds (its fields were edited)",
    ),
    Case(
        "one changed byte and its stated leaf hash",
        lambda log: _edit(log.bundle(stated=True), lambda b: _restate(b, 9, actor="agent:traded")),
        "root_mismatch",
        None,
        "root mismatch: events seq 1..12 and the range proof do not give the root",
    ),
    Case(
        "a stated leaf hash wrong, the events right",
        lambda log: _edit(log.bundle(stated=True), lambda b: b["leaf_hashes"].__setitem__(3, b64(bytes(32)))),
        "leaf_hashes",
        4,
        "seq 4: the stated leaf hash is not the event's (the events verify)",
    ),
    Case(
        "a key twice",
        lambda log: dumps(log.bundle()).replace('"from_seq":1,', '"from_seq":1,"from_seq":1,'),
        "malformed",
        None,
        "a key appears twice",
    ),
    Case(
        "range proof not base64",
        lambda log: {**log.bundle(1, 3), "range_proof": ["not a hash"]},
        "shape",
        None,
        "range_proof holds 'not a hash', not a base64 SHA-256 hash",
    ),
    Case(
        "one changed byte",
        _event(7, lambda e: e.update(actor="agent:traded")),
        "root_mismatch",
        None,
        "root mismatch: events seq 1..12 and the range proof do not give the root of the checkpoint "
        "of size 12 (an event edited, moved, dropped or added)",
    ),
    Case(
        "two leaves swapped",
        lambda log: _edit(log.bundle(), lambda b: _swap(b, 7, 9)),
        "leaf_position",
        8,
        "seq 8: leaf is not its position (the event in its place says seq 10)",
    ),
    Case(
        "two leaves swapped, seq rewritten",
        lambda log: _edit(log.bundle(), lambda b: _swap_renumbered(b, 7, 9)),
        "root_mismatch",
        None,
        "root mismatch: events seq 1..12",
    ),
    Case(
        "a leaf removed from the middle",
        lambda log: _edit(log.bundle(), lambda b: _drop(b, 8)),
        "event_missing",
        8,
        "seq 8: missing from the bundle (the event in its place says seq 9)",
    ),
    Case(
        "a leaf removed, the rest renumbered",
        lambda log: _drop_renumbered(log, 8),
        "root_mismatch",
        None,
        "root mismatch: events seq 1..11 and the range proof do not give the root",
    ),
    Case(
        "the last events removed, to_seq adjusted",
        lambda log: _edit(log.bundle(), lambda b: _drop_last(b, 3)),
        "root_mismatch",
        None,
        "root mismatch: the range proof does not fit",
    ),
    Case(
        "the last events removed, to_seq kept",
        lambda log: _edit(log.bundle(), lambda b: b["events"].pop()),
        "event_missing",
        12,
        "seq 12: missing from the bundle (it ends before to_seq 12)",
    ),
    Case(
        "a checkpoint of another origin",
        lambda log: _resign(log, log.bundle(), origin="audit.keelgate.test/umbrella"),
        "origin",
        None,
        "the checkpoint is of the log 'audit.keelgate.test/umbrella', not the bundle's",
    ),
    Case(
        "a checkpoint signed by another key",
        lambda log: _resign(log, log.bundle(), key=Ed25519PrivateKey.generate()),
        "signature",
        None,
        "the checkpoint is not signed by audit.keelgate.test/acme",
    ),
    Case(
        "the bundle's key named for another origin",
        lambda log: {**log.bundle(), "vkey": str(verifier_key("elsewhere", log.key))},
        "vkey",
        None,
        "the bundle's key is named 'elsewhere', not for its origin 'audit.keelgate.test/acme'",
    ),
    Case(
        "--vkey pins the real key, the bundle carries another",
        _other_key_bundle,
        "signature",
        None,
        "the checkpoint is not signed by audit.keelgate.test/acme",
        vkey=lambda log: str(log.vkey),
    ),
    Case("a signature line edited", _edited_signature, "signature", None, "does not verify"),
    Case(
        "to_seq past the checkpoint",
        lambda log: _resign(log, log.bundle(), size=10),
        "size",
        None,
        "the checkpoint's tree has 10 events, fewer than to_seq 12",
    ),
    Case(
        "another tenant's event",
        _event(3, lambda e: e.update(tenant_id="umbrella")),
        "wrong_tenant",
        3,
        "seq 3: the event belongs to 'umbrella', not 'acme'",
    ),
    Case(
        "a v 3 leaf",
        _event(9, lambda e: e.update(v=3)),
        "leaf_version",
        9,
        "seq 9: v is 3, not 1 or 2",
    ),
    Case(
        "a v 2 leaf carrying a chain link",
        _event(9, lambda e: e.update(hash="0" * 64)),
        "leaf_fields",
        9,
        "seq 9: v 2 leaf: fields missing [], unknown ['hash']",
    ),
    Case(
        "a v 1 event after the cut-over",
        _event(9, lambda e: e.update(v=1, prev_hash="0" * 64, hash="0" * 64)),
        "leaf_version",
        9,
        "seq 9: a hash-chained (v 1) event after the cut-over",
    ),
    Case(
        "a v 1 event edited",
        _event(2, lambda e: e["body"].update(n=20)),
        "hash_mismatch",
        2,
        "seq 2: its fields do not give its hash",
    ),
    Case(
        "a v 1 event's link edited",
        _event(4, lambda e: e.update(prev_hash="1" * 64)),
        "prev_hash_mismatch",
        4,
        "seq 4: its prev_hash is not seq 3's hash",
    ),
    Case(
        "an integer JCS cannot write",
        _event(10, lambda e: e["body"].update(n=2**60)),
        "leaf_unhashable",
        10,
        "seq 10: the event cannot be a leaf",
    ),
    Case(
        "--previous of a rewritten tree (the bundle holds its prefix)",
        lambda log: log.bundle(),
        "inconsistent",
        None,
        "the log was rewritten: the tree of size 6 kept is not a prefix of this one (events 1..6 give",
        previous=lambda log: _rewritten_log_note(log, 6),
    ),
    Case(
        "--previous of a rewritten tree (by the consistency proof)",
        lambda log: log.bundle(8, 12, consistency_from=[6]),
        "inconsistent",
        None,
        "the log was rewritten: the tree of size 6 kept is not a prefix of this one",
        previous=lambda log: _rewritten_log_note(log, 6),
    ),
    Case(
        "--previous larger than the bundle's checkpoint",
        lambda log: log.bundle(size=10),
        "previous_larger",
        None,
        "the log shrank: the checkpoint kept has size 12, this one 10",
        previous=lambda log: log.note(12),
    ),
    Case(
        "--previous with no consistency proof",
        lambda log: log.bundle(8, 12),
        "no_consistency_proof",
        None,
        "the bundle carries no consistency proof from size 6: export it again with --previous",
        previous=lambda log: log.note(6),
    ),
    Case(
        "--previous of another origin",
        lambda log: log.bundle(),
        "previous_origin",
        None,
        "the previous checkpoint is of the log 'elsewhere'",
        previous=lambda log: log.note(6, origin="elsewhere"),
    ),
    Case(
        "--previous signed by another key",
        lambda log: log.bundle(),
        "previous_signature",
        None,
        "the previous checkpoint is not signed by audit.keelgate.test/acme",
        previous=lambda log: log.note(6, key=Ed25519PrivateKey.generate()),
    ),
]
"""Every bad bundle, on :func:`mixed_log`: seq 1..5 hash-chained, 6..12 tree leaves."""
