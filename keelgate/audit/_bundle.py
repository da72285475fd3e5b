"""Audit bundles: a run of one tenant's events, with what proves them offline.

A bundle is one JSON object, ``keelgate-audit-bundle/1``, every field required::

    {
      "format": "keelgate-audit-bundle/1",
      "tenant_id": "acme",                 # whose log it is
      "origin": "...",                     # the log's origin: the checkpoint's first line
      "vkey": "name+keyid+base64",         # the verifier key the log signs with
      "checkpoint": "...",                 # the signed note: origin, size, root, a blank
                                           #   line, the signature lines
      "from_seq": 1, "to_seq": 120,        # 1 <= from_seq <= to_seq <= the checkpoint's size
      "events": [...],                     # the leaf objects of seq from_seq..to_seq, in order
      "range_proof": ["base64", ...],      # the subtrees outside leaves [from_seq-1, to_seq)
                                           #   that the root needs, left to right
      "leaf_hashes": ["base64", ...],      # optional: each event's leaf hash as the log
                                           #   stores it, to name an edited event
      "consistency": [                     # proofs from older tree sizes to the checkpoint's
        {"size": 57, "hashes": ["base64", ...]}   #   (RFC 9162 §2.1.4), maybe none
      ]
    }

An event is its leaf object (:func:`~keelgate.audit.leaf_object`): the tree's leaf is
its RFC 8785 bytes, so the verifier hashes what it reads and trusts no hash the bundle
states. ``leaf_hashes`` serve only to say *which* event was edited: when the events do
not give the signed root but the stated hashes do, the first event whose bytes differ
from its stated (and so signed) hash is the one named. :func:`build_bundle` makes one
from a store's tree; :func:`verify_bundle` checks one with the engine alone, as
``python -m keelgate.audit.verify`` does.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from keelgate.audit._event import GENESIS_HASH, compute_hash, fast_canonical, format_at
from keelgate.audit._leaf import LEAF_FIELDS, object_leaf_hash
from keelgate.audit._merkle import (
    EMPTY_ROOT,
    HashReader,
    ProofError,
    check_consistency,
    consistency_proof,
    range_proof,
    root_from_range,
)
from keelgate.audit._note import (
    Cosignature,
    CosignerKey,
    NoteError,
    VerifierKey,
    note_cosignatures,
    open_note,
    parse_checkpoint,
)

__all__ = ["BUNDLE_FORMAT", "BundleError", "BundleReport", "build_bundle", "verify_bundle"]

BUNDLE_FORMAT = "keelgate-audit-bundle/1"
"""The ``format`` of every bundle this version writes and reads."""

_FIELDS = frozenset(
    {"format", "tenant_id", "origin", "vkey", "checkpoint", "from_seq", "to_seq", "events"}
    | {"range_proof", "consistency"}
)
_OPTIONAL = frozenset({"leaf_hashes"})
_CHAIN_FIELDS = ("prev_hash", "hash")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_MAX_SEQ = 2**63 - 1
_PROGRESS_EVERY = 100_000
"""Events between two calls of :func:`verify_bundle`'s ``progress``."""


class BundleError(ValueError):
    """A bundle that does not verify: the first check it fails, and where.

    ``reason`` is stable, one per check, in the order they run:

    - ``malformed``: not JSON (a truncated file), a key twice in an object, NaN;
    - ``format``: not ``keelgate-audit-bundle/1``;
    - ``shape``: a field missing, unknown or of the wrong type; a range that cannot be;
    - ``event_missing``: an event of ``from_seq..to_seq`` is not in the bundle;
    - ``leaf_position``: an event is not in its place (another ``seq`` stands there);
    - ``vkey``: the bundle's own key is not a key, or not named for the bundle's origin;
    - ``signature``: the checkpoint is not a note signed by the key;
    - ``checkpoint``: the signed text is not a checkpoint;
    - ``origin``: the checkpoint is another log's;
    - ``size``: the checkpoint's tree is smaller than ``to_seq``;
    - ``leaf_version``: ``v`` is not 1 or 2, or a hash-chained (``v`` 1) event follows
      one written since the cut-over;
    - ``leaf_fields``: a leaf's fields are not exactly those of its version, or of the
      wrong type;
    - ``wrong_tenant``: a leaf is another tenant's;
    - ``leaf_unhashable``: a leaf RFC 8785 cannot write (an integer beyond 2**53);
    - ``prev_hash_mismatch``, ``hash_mismatch``: a ``v`` 1 event's chain link is wrong;
    - ``leaf_mismatch``: an event's bytes are not the leaf the signed tree holds (it
      was edited): named when the bundle's ``leaf_hashes`` give the signed root;
    - ``root_mismatch``: the events and the range proof do not give the signed root
      (an event edited, moved, dropped or added);
    - ``leaf_hashes``: the events give the signed root, but the stated hashes are not theirs;
    - with a previous checkpoint: ``previous_signature`` (not signed by the same key),
      ``previous_checkpoint`` (not a checkpoint), ``previous_origin``, ``previous_larger``
      (the log shrank: truncated or rolled back), ``no_consistency_proof`` (the bundle
      cannot show it: export it again with that checkpoint), ``inconsistent`` (the log
      was rewritten since);
    - with witness keys: ``cosignature`` (the checkpoint carries no cosignature by a
      witness named, or one that does not verify: the detail names every such witness).

    ``seq`` names the first bad event where there is one.
    """

    def __init__(self, reason: str, detail: str, seq: int | None = None) -> None:
        self.reason = reason
        self.detail = detail
        self.seq = seq
        super().__init__(f"seq {seq}: {detail}" if seq is not None else detail)


@dataclass(frozen=True)
class BundleReport:
    """What :func:`verify_bundle` checked: the events ``from_seq..to_seq`` of
    ``tenant_id`` are the leaves the checkpoint of ``size`` leaves and ``root`` says,
    signed by ``signer`` (pinned by the caller, or the bundle's own key); and, when a
    previous checkpoint was given, that its tree of ``previous_size`` is a prefix; and,
    when witness keys were given, each witness's ``cosignatures`` on the checkpoint.
    """

    tenant_id: str
    origin: str
    from_seq: int
    to_seq: int
    size: int
    root: bytes
    signer: VerifierKey
    pinned: bool
    previous_size: int | None = None
    cosignatures: tuple[Cosignature, ...] = ()

    @property
    def events(self) -> int:
        """How many events were checked."""
        return self.to_seq - self.from_seq + 1


def build_bundle(
    *,
    tenant_id: str,
    origin: str,
    vkey: VerifierKey,
    note: str,
    events: Sequence[Mapping[str, Any]],
    read: HashReader,
    consistency_from: Iterable[int] = (),
    leaf_hashes: Sequence[bytes] | None = None,
) -> dict[str, Any]:
    """The bundle of ``events`` (leaf objects, consecutive) under the signed checkpoint ``note``.

    ``read`` reads the stored tree the checkpoint was taken of (its range proof and the
    consistency proofs from each size of ``consistency_from`` that is between 0 and the
    checkpoint's, exclusive: the sizes of checkpoints an auditor kept). ``leaf_hashes``,
    the events' leaf hashes as the log stores them, let the verifier name an edited
    event (the bundle carries them when given). Pure: the caller
    reads the events and writes the JSON (``json.dumps``). Raises ValueError for a note
    ``vkey`` did not sign, another origin, events that are not consecutive, or sizes
    past the checkpoint's, so a bundle that would not verify for those is never made.
    """
    text, _ = open_note(note, [vkey])
    checkpoint = parse_checkpoint(text)
    if vkey.name != origin or checkpoint.origin != origin:
        raise ValueError(f"the key {vkey.name!r} and the checkpoint's origin are not {origin!r}")
    if not events:
        raise ValueError("a bundle holds at least one event")
    from_seq = events[0]["seq"]
    for offset, event in enumerate(events):
        if event["seq"] != from_seq + offset or event["tenant_id"] != tenant_id:
            raise ValueError(f"event {offset} of the bundle is not {tenant_id}'s seq {from_seq + offset}")
    to_seq = from_seq + len(events) - 1
    if leaf_hashes is not None and len(leaf_hashes) != len(events):
        raise ValueError(f"{len(leaf_hashes)} leaf hashes for {len(events)} events")
    if not 1 <= from_seq <= to_seq <= checkpoint.size:
        raise ValueError(f"seq {from_seq}..{to_seq} is not in the checkpoint of size {checkpoint.size}")
    consistency = []
    for size in sorted(set(consistency_from)):
        if not 0 <= size <= checkpoint.size:
            raise ValueError(f"no consistency proof from size {size} to {checkpoint.size}")
        if 0 < size < checkpoint.size:
            proof = consistency_proof(size, checkpoint.size, read)
            consistency.append({"size": size, "hashes": [_b64(h) for h in proof]})
    bundle = {
        "format": BUNDLE_FORMAT,
        "tenant_id": tenant_id,
        "origin": origin,
        "vkey": str(vkey),
        "checkpoint": note,
        "from_seq": from_seq,
        "to_seq": to_seq,
        "events": [dict(event) for event in events],
        "range_proof": [_b64(h) for h in range_proof(from_seq - 1, to_seq, checkpoint.size, read)],
        "consistency": consistency,
    }
    if leaf_hashes is not None:
        bundle["leaf_hashes"] = [_b64(h) for h in leaf_hashes]
    return bundle


def verify_bundle(
    bundle: str | bytes | Mapping[str, Any],
    *,
    vkey: VerifierKey | None = None,
    previous: str | None = None,
    progress: Callable[[int], None] | None = None,
    witnesses: Sequence[CosignerKey] = (),
) -> BundleReport:
    """Check a bundle (its JSON text, or the object) with the engine alone; raise
    :class:`BundleError` at the first check it fails.

    ``vkey``, the key the auditor trusts, overrides the bundle's own (which is taken
    only if named for the bundle's origin). ``previous`` is a signed checkpoint the
    auditor kept earlier: the bundle's must be of a tree it is a prefix of, shown from the
    bundle's events when they start at seq 1 and reach its size, else by the bundle's
    consistency proof from its size. ``progress`` is called with the number of events
    checked, every 100,000. ``witnesses`` are the keys of witnesses the auditor trusts:
    the checkpoint must carry a ``cosignature/v1`` by each that verifies.
    """
    data = _load(bundle) if isinstance(bundle, (str, bytes)) else bundle
    shape = _Shape.check(data)
    key, pinned = _key(shape, vkey)
    try:
        text, _ = open_note(shape.checkpoint, [key])
    except NoteError as exc:
        raise BundleError("signature", f"the checkpoint is not signed by {_named(key)}: {exc}") from exc
    try:
        checkpoint = parse_checkpoint(text)
    except NoteError as exc:
        raise BundleError("checkpoint", f"the signed note is not a checkpoint: {exc}") from exc
    if checkpoint.origin != shape.origin:
        raise BundleError(
            "origin", f"the checkpoint is of the log {checkpoint.origin!r}, not the bundle's {shape.origin!r}"
        )
    if checkpoint.size < shape.to_seq:
        raise BundleError(
            "size", f"the checkpoint's tree has {checkpoint.size} events, fewer than to_seq {shape.to_seq}"
        )
    leaves = _leaf_hashes(shape, progress)
    lo, hi = shape.from_seq - 1, shape.to_seq
    try:
        root = root_from_range(lo, hi, checkpoint.size, leaves, shape.range_proof)
    except ProofError as exc:
        raise BundleError("root_mismatch", f"root mismatch: the range proof does not fit: {exc}") from exc
    if root != checkpoint.root:
        _name_the_edited_event(shape, leaves, checkpoint.size, checkpoint.root)
        raise BundleError(
            "root_mismatch",
            f"root mismatch: events seq {shape.from_seq}..{shape.to_seq} and the range proof do not "
            f"give the root of the checkpoint of size {checkpoint.size} "
            "(an event edited, moved, dropped or added)",
        )
    if shape.leaf_hashes is not None and shape.leaf_hashes != leaves:
        seq = shape.from_seq + next(
            i for i, (a, b) in enumerate(zip(shape.leaf_hashes, leaves, strict=True)) if a != b
        )
        raise BundleError("leaf_hashes", "the stated leaf hash is not the event's (the events verify)", seq)
    previous_size = None
    if previous is not None:
        previous_size = _check_previous(previous, key, shape, checkpoint.size, checkpoint.root, leaves)
    cosignatures = _check_cosignatures(shape.checkpoint, witnesses)
    return BundleReport(
        shape.tenant_id,
        shape.origin,
        shape.from_seq,
        shape.to_seq,
        checkpoint.size,
        checkpoint.root,
        key,
        pinned,
        previous_size,
        cosignatures,
    )


def _check_cosignatures(note: str, witnesses: Sequence[CosignerKey]) -> tuple[Cosignature, ...]:
    """Each witness's verified cosignature on ``note``; a :class:`BundleError` naming every
    witness whose cosignature is missing or does not verify."""
    found: list[Cosignature] = []
    failed: list[str] = []
    for witness in witnesses:
        try:
            mine = note_cosignatures(note, [witness])
        except NoteError as exc:
            failed.append(f"{witness.name} {witness.key_id.hex()}: {exc}")
            continue
        if not mine:
            failed.append(f"{witness.name} {witness.key_id.hex()}: no cosignature by this witness")
        found.extend(mine)
    if failed:
        raise BundleError("cosignature", "witness cosignatures did not check: " + "; ".join(failed))
    return tuple(found)


# -- the shape ----------------------------------------------------------------------


def _load(text: str | bytes) -> Any:
    def no_twice(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        found = dict(pairs)
        if len(found) != len(pairs):
            raise ValueError("a key appears twice in one object")
        return found

    def no_constant(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    try:
        return json.loads(text, object_pairs_hook=no_twice, parse_constant=no_constant)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError too
        raise BundleError("malformed", f"the bundle is not JSON (a truncated file?): {exc}") from exc


def _is_int(value: object) -> bool:
    return type(value) is int


@dataclass(frozen=True)
class _Shape:
    """A bundle whose fields are all there, each of its type, its events in their places."""

    tenant_id: str
    origin: str
    vkey: str
    checkpoint: str
    from_seq: int
    to_seq: int
    events: list[dict[str, Any]]
    range_proof: list[bytes]
    consistency: dict[int, list[bytes]]
    leaf_hashes: list[bytes] | None

    @classmethod
    def check(cls, data: Any) -> _Shape:
        if not isinstance(data, Mapping):
            raise BundleError("malformed", "the bundle is not a JSON object")
        if data.get("format") != BUNDLE_FORMAT:
            raise BundleError("format", f"the format is {data.get('format')!r}, not {BUNDLE_FORMAT!r}")
        missing, unknown = sorted(_FIELDS - set(data)), sorted(set(data) - _FIELDS - _OPTIONAL)
        if missing or unknown:
            raise BundleError("shape", f"fields missing {missing}, unknown {unknown}")
        for name in ("tenant_id", "origin", "vkey", "checkpoint"):
            if not isinstance(data[name], str) or not data[name]:
                raise BundleError("shape", f"{name} is not a string")
        from_seq, to_seq = data["from_seq"], data["to_seq"]
        if not (_is_int(from_seq) and _is_int(to_seq) and 1 <= from_seq <= to_seq <= _MAX_SEQ):
            raise BundleError("shape", f"from_seq {from_seq!r} and to_seq {to_seq!r} are not 1 <= a <= b")
        events = data["events"]
        if not isinstance(events, list):
            raise BundleError("shape", "events is not a list")
        _check_places(events, from_seq, to_seq)
        if not isinstance(data["range_proof"], list):
            raise BundleError("shape", "range_proof is not a list")
        stated = data.get("leaf_hashes")
        if stated is not None and (not isinstance(stated, list) or len(stated) != len(events)):
            raise BundleError("shape", "leaf_hashes is not one hash per event")
        return cls(
            data["tenant_id"],
            data["origin"],
            data["vkey"],
            data["checkpoint"],
            from_seq,
            to_seq,
            events,
            [_hash(h, "range_proof") for h in data["range_proof"]],
            _consistency(data["consistency"]),
            None if stated is None else [_hash(h, "leaf_hashes") for h in stated],
        )


def _check_places(events: list[Any], from_seq: int, to_seq: int) -> None:
    """Every event is an object whose ``seq`` is its place; none is missing, none extra."""
    for offset, event in enumerate(events[: to_seq - from_seq + 1]):
        seq = from_seq + offset
        if not isinstance(event, dict):
            raise BundleError("shape", "the event is not a JSON object", seq)
        if event.get("seq") != seq or not _is_int(event.get("seq")):
            said = {e.get("seq") for e in events if isinstance(e, dict) and _is_int(e.get("seq"))}
            found = f"the event in its place says seq {event.get('seq')!r}"
            if seq in said:
                raise BundleError("leaf_position", f"leaf is not its position ({found})", seq)
            raise BundleError("event_missing", f"missing from the bundle ({found})", seq)
    if len(events) < to_seq - from_seq + 1:
        seq = from_seq + len(events)
        raise BundleError("event_missing", f"missing from the bundle (it ends before to_seq {to_seq})", seq)
    if len(events) > to_seq - from_seq + 1:
        raise BundleError("shape", f"{len(events)} events for seq {from_seq}..{to_seq}", to_seq + 1)


def _hash(value: Any, where: str) -> bytes:
    try:
        raw = base64.b64decode(value.encode("ascii"), validate=True) if isinstance(value, str) else b""
    except (binascii.Error, UnicodeEncodeError):
        raw = b""
    if len(raw) != 32:
        raise BundleError("shape", f"{where} holds {value!r}, not a base64 SHA-256 hash")
    return raw


def _consistency(value: Any) -> dict[int, list[bytes]]:
    if not isinstance(value, list):
        raise BundleError("shape", "consistency is not a list")
    proofs: dict[int, list[bytes]] = {}
    for entry in value:
        if not isinstance(entry, dict) or set(entry) != {"size", "hashes"}:
            raise BundleError("shape", "a consistency entry is not {size, hashes}")
        size, hashes = entry["size"], entry["hashes"]
        if not _is_int(size) or not 1 <= size <= _MAX_SEQ or size in proofs or not isinstance(hashes, list):
            raise BundleError("shape", f"the consistency entry of size {size!r} is not one proof per size")
        proofs[size] = [_hash(h, f"consistency from size {size}") for h in hashes]
    return proofs


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


# -- the key --------------------------------------------------------------------------


def _named(key: VerifierKey) -> str:
    return f"{key.name} {key.key_id.hex()}"


def _key(shape: _Shape, pinned: VerifierKey | None) -> tuple[VerifierKey, bool]:
    """The key to check the checkpoint with: the caller's, else the bundle's own."""
    if pinned is not None:
        return pinned, True
    try:
        key = VerifierKey.parse(shape.vkey)
    except NoteError as exc:
        raise BundleError("vkey", f"the bundle's key is not a verifier key: {exc}") from exc
    if key.name != shape.origin:
        raise BundleError(
            "vkey", f"the bundle's key is named {key.name!r}, not for its origin {shape.origin!r}"
        )
    return key, False


# -- the leaves -----------------------------------------------------------------------


def _leaf_hashes(shape: _Shape, progress: Callable[[int], None] | None) -> list[bytes]:
    """Every event checked as a leaf, and chain-linked if it is hash-chained; their leaf hashes."""
    hashes: list[bytes] = []
    chain_head: str | None = None  # the previous event's hash, while events are v 1
    tree_only = False  # a v 2 event was seen: no v 1 event may follow
    for offset, leaf in enumerate(shape.events):
        seq = shape.from_seq + offset
        version = leaf.get("v")
        if not _is_int(version) or version not in (1, 2):
            raise BundleError("leaf_version", f"v is {version!r}, not 1 or 2", seq)
        if version == 1 and tree_only:
            raise BundleError("leaf_version", "a hash-chained (v 1) event after the cut-over", seq)
        _check_fields(leaf, version, seq)
        if leaf["tenant_id"] != shape.tenant_id:
            raise BundleError(
                "wrong_tenant", f"the event belongs to {leaf['tenant_id']!r}, not {shape.tenant_id!r}", seq
            )
        if version == 1:
            _check_link(leaf, seq, GENESIS_HASH if seq == 1 else chain_head)
            chain_head = leaf["hash"]
        else:
            tree_only, chain_head = True, None
        try:
            hashes.append(object_leaf_hash(leaf))
        except ValueError as exc:
            raise BundleError("leaf_unhashable", f"the event cannot be a leaf: {exc}", seq) from exc
        if progress is not None and (offset + 1) % _PROGRESS_EVERY == 0:
            progress(offset + 1)
    return hashes


def _check_fields(leaf: dict[str, Any], version: int, seq: int) -> None:
    wanted = {*LEAF_FIELDS, *(_CHAIN_FIELDS if version == 1 else ())}
    if set(leaf) != wanted:
        missing, unknown = sorted(wanted - set(leaf)), sorted(set(leaf) - wanted)
        raise BundleError(
            "leaf_fields", f"v {version} leaf: fields missing {missing}, unknown {unknown}", seq
        )
    for name in ("tenant_id", "at", "actor", "kind", *(_CHAIN_FIELDS if version == 1 else ())):
        if not isinstance(leaf[name], str):
            raise BundleError("leaf_fields", f"{name} is not a string", seq)
    if not isinstance(leaf["body"], dict):
        raise BundleError("leaf_fields", "body is not a JSON object", seq)
    if version == 1 and not all(_HEX64.fullmatch(leaf[name]) for name in _CHAIN_FIELDS):
        raise BundleError("leaf_fields", "prev_hash and hash are not sha256 hex", seq)


def _check_link(leaf: dict[str, Any], seq: int, prev_hash: str | None) -> None:
    """A hash-chained event links to the one before (when the bundle holds it) and hashes to its hash."""
    if prev_hash is not None and leaf["prev_hash"] != prev_hash:
        before = "the genesis hash" if seq == 1 else f"seq {seq - 1}'s hash"
        raise BundleError("prev_hash_mismatch", f"its prev_hash is not {before}", seq)
    try:
        at = datetime.fromisoformat(leaf["at"])
        if format_at(at) != leaf["at"]:
            raise ValueError("not the stored form of a time")
        canonical = fast_canonical(leaf["tenant_id"], seq, at, leaf["actor"], leaf["kind"], leaf["body"])
    except (TypeError, ValueError) as exc:
        raise BundleError("hash_mismatch", f"its fields cannot give its hash: {exc}", seq) from exc
    if compute_hash(leaf["prev_hash"], canonical) != leaf["hash"]:
        raise BundleError("hash_mismatch", "its fields do not give its hash", seq)


def _name_the_edited_event(shape: _Shape, leaves: Sequence[bytes], size: int, root: bytes) -> None:
    """Raise ``leaf_mismatch`` at the first edited event, when the stated leaf hashes are
    the signed tree's (they give its root); else return, and the root mismatch stands."""
    stated = shape.leaf_hashes
    if stated is None:
        return
    try:
        signed = root_from_range(shape.from_seq - 1, shape.to_seq, size, stated, shape.range_proof) == root
    except ProofError:
        return
    if signed:
        offset = _first_difference(stated, leaves)
        raise BundleError(
            "leaf_mismatch",
            "the event is not the leaf the signed tree holds (its fields were edited)",
            shape.from_seq + offset,
        )


def _first_difference(a: Sequence[bytes], b: Sequence[bytes]) -> int:
    return next(i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y)


# -- a previous checkpoint --------------------------------------------------------------


def _check_previous(
    previous: str, key: VerifierKey, shape: _Shape, size: int, root: bytes, leaves: Sequence[bytes]
) -> int:
    """The size of the previous checkpoint, once its tree is shown a prefix of ``(size, root)``."""
    try:
        text, _ = open_note(previous, [key])
    except NoteError as exc:
        raise BundleError(
            "previous_signature", f"the previous checkpoint is not signed by {_named(key)}: {exc}"
        ) from exc
    try:
        kept = parse_checkpoint(text)
    except NoteError as exc:
        raise BundleError("previous_checkpoint", f"the previous note is not a checkpoint: {exc}") from exc
    if kept.origin != shape.origin:
        raise BundleError(
            "previous_origin", f"the previous checkpoint is of the log {kept.origin!r}, not {shape.origin!r}"
        )
    if kept.size > size:
        raise BundleError(
            "previous_larger",
            f"the log shrank: the checkpoint kept has size {kept.size}, this one {size} "
            "(the log was truncated or rolled back)",
        )
    rewritten = f"the log was rewritten: the tree of size {kept.size} kept is not a prefix of this one"
    if kept.size == 0 or kept.size == size:
        if kept.root != (EMPTY_ROOT if kept.size == 0 else root):
            raise BundleError("inconsistent", f"{rewritten} (another root for size {kept.size})")
    elif shape.from_seq == 1 and shape.to_seq >= kept.size:
        if root_from_range(0, kept.size, kept.size, leaves[: kept.size], []) != kept.root:
            raise BundleError("inconsistent", f"{rewritten} (events 1..{kept.size} give another root)")
    elif kept.size not in shape.consistency:
        raise BundleError(
            "no_consistency_proof",
            f"the bundle carries no consistency proof from size {kept.size}: "
            "export it again with --previous and the checkpoint kept",
        )
    else:
        try:
            check_consistency(kept.size, size, kept.root, root, shape.consistency[kept.size])
        except ProofError as exc:
            raise BundleError("inconsistent", f"{rewritten} ({exc})") from exc
    return kept.size
