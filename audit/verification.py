"""Verifying a tenant's log in the database: the chain before the cut-over, the tree throughout.

One pass over the events the head counts, in order, checks: numbers 1, 2, 3, ...; the
hash-chained events (``version`` 1) first, each linking to the one before; every
event's leaf hash recomputed from its fields (RFC 8785 bytes); every stored subtree hash
recomputed from the leaves; the root at every signed checkpoint (whose signature must
verify) and at the head. Then no numbered event may lie beyond the head. The first
break is reported with its number and a reason, so ``verify_audit`` and the page can
name the first bad event.

After a retirement (:mod:`audit.retention`) the events below the cut are gone, their
subtree hashes kept, and the walk starts at the cut from those hashes
(:meth:`keelgate.audit.TreeBuilder.from_edge`). What is still checked below it: every
signed checkpoint there, each shown a prefix of the tree at the cut by a consistency
proof built from the stored hashes (so the hashes every later proof is served from agree
with every signature, and the edge the walk starts from is bound by the checkpoints at
and after the cut); and that the newest ``audit.retired`` event kept names the cut, so
events deleted by hand are never taken for retired ones. What is not: the retired
events' own fields (the archive's to prove, offline, under its signed checkpoint), and a
stored hash that no signed checkpoint's proof uses. A hash-chained (``version`` 1)
event kept is checked from the first one kept, whose ``prev_hash`` is taken as given
(the event it links to is in the archive); the head's chain hash only while the last
chained event is kept. Its leaf, ``prev_hash`` included, is checked as every leaf is.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from django.db.models import F, Q, Subquery, Value
from django.db.models.functions import Coalesce, Greatest

from audit.checkpoints import log_verifier_key
from audit.digest import verify_digest
from audit.models import LEGACY_CHAIN, TREE_LEAF, ChainHead, Checkpoint, TreeNode
from audit.models import AuditEvent as EventRow
from audit.retention import RETIRED
from audit.wiring import integrate_pending
from keelgate.audit import (
    GENESIS_HASH,
    ChainReport,
    NoteError,
    ProofError,
    TreeBuilder,
    check_consistency,
    compute_hash,
    consistency_proof,
    fast_canonical,
    in_stored_form,
    leaf_object,
    object_leaf_hash,
    open_note,
    parse_checkpoint,
    range_nodes,
)
from sitekit.errors import AuditRetiredError, DigestError

__all__ = [
    "CHECKPOINT_MISMATCH",
    "HEAD_MISMATCH",
    "LEAF_MISMATCH",
    "NODE_MISMATCH",
    "RETIRED_MISMATCH",
    "ROOT_MISMATCH",
    "VERSION_ORDER",
    "verify_log",
]

HEAD_MISMATCH = "head_mismatch"
"""The events do not end at the head: a deleted tail, or an event numbered behind the
sequencer's back. ``first_bad_seq`` is the first number that disagrees."""
LEAF_MISMATCH = "leaf_mismatch"
"""An event's fields do not give its stored leaf hash: the event was edited."""
NODE_MISMATCH = "node_mismatch"
"""A stored subtree hash is not what the leaves give (``first_bad_seq``: its first leaf)."""
ROOT_MISMATCH = "root_mismatch"
"""The head's root is not the root of the events."""
CHECKPOINT_MISMATCH = "checkpoint_mismatch"
"""A signed checkpoint does not verify, or its root is not the events' root at its size:
the log was rewritten after it was signed."""
VERSION_ORDER = "version_order"
"""A hash-chained event after a tree leaf, or an unknown version."""
RETIRED_MISMATCH = "retired_mismatch"
"""The log keeps events from a cut that no ``audit.retired`` event it keeps names: events
were deleted by hand (``first_bad_seq``: the first one no retirement accounts for); or an
event below the cut is in the live log."""


def verify_log(*, tenant_id: str, against: Mapping[str, Any] | None = None) -> ChainReport:
    """Verify ``tenant_id``'s log and report the first break (see the module).

    The report's ``head_hash`` is the tree's root at ``head_seq``. With ``against`` (a
    digest from :func:`audit.digest.sign_head`), the digest is checked first (raising
    :class:`~sitekit.errors.DigestError` if it is malformed, for another tenant or not
    signed by this site) and the log must still hold it: the root at its ``seq``, or for
    a digest signed before the tree, the chain hash there (``digest_mismatch``). A digest
    of a retired event that is not a root the kept hashes prove (a chain hash) cannot be
    checked here: :class:`~sitekit.errors.AuditRetiredError` (its archive can).
    Safe to run while others append: it walks what the head counted when it began.
    The report's ``checked`` counts the events walked: those kept.
    """
    expect: tuple[int, str] | None = None
    if against is not None:
        verify_digest(against)
        if against["tenant_id"] != tenant_id:
            raise DigestError("tenant_id is another tenant's")
        expect = (int(against["seq"]), str(against["hash"]))
    integrate_pending([tenant_id])
    head = ChainHead.objects.filter(tenant_id=tenant_id).first()
    size, root = (head.seq, head.root) if head else (0, "")
    kept = max(head.retired_below, 1) if head else 1
    walk = _Walk(tenant_id, checkpoints=_checkpoint_roots(tenant_id, size), expect=expect)
    if kept - 1 > size:  # retired past its own end: the head was edited
        return walk.broken(size + 1, HEAD_MISMATCH)
    if head is not None and kept > 1:
        report = walk.start_at(kept - 1, head_chain_seq=head.chain_seq)
        if report is not None:
            return report
    rows = (
        EventRow.objects.filter(tenant_id=tenant_id, seq__lte=size)
        .order_by("seq")
        .values_list(*_Walk.COLUMNS)
    )
    report = walk.run(rows.iterator(chunk_size=_Walk.CHUNK))
    if report is not None:
        return report
    if walk.size != size:
        return walk.broken(walk.size + 1, HEAD_MISMATCH)
    walked_root = walk.walked_root()
    if size and walked_root != root:
        return walk.broken(size, ROOT_MISMATCH)
    if expect is not None and not walk.expect_met:
        return walk.broken(expect[0], "digest_mismatch")
    if (
        head is not None
        and (head.chain_seq > walk.start or walk.start == 0)
        and (head.chain_seq, head.hash if head.chain_seq else GENESIS_HASH) != (walk.chain_seq, walk.chain)
    ):  # the head names the last hash-chained event (the cut-over), unless it was retired
        return walk.broken(min(head.chain_seq, walk.chain_seq) + 1, HEAD_MISMATCH)
    if kept > 1 and (unaccounted := _unaccounted(tenant_id, kept)) is not None:
        return walk.broken(unaccounted, RETIRED_MISMATCH)
    # What lies beyond the head, each read in one statement with the head it is compared
    # with: the head only grows, and with the events and checkpoints it counts, so a
    # sequencer numbering or signing meanwhile is never taken for a cut or a forgery.
    now = Greatest(
        Coalesce(Subquery(ChainHead.objects.filter(tenant_id=tenant_id).values("seq")[:1]), Value(0)),
        Value(size),
    )
    beyond = (
        Checkpoint.objects.filter(tenant_id=tenant_id)
        .annotate(head=now)
        .filter(size__gt=F("head"))
        .values_list("head", flat=True)
        .first()
    )
    if beyond is not None:  # a signed checkpoint of a bigger tree than there is: the log was cut back
        return walk.broken(beyond + 1, CHECKPOINT_MISMATCH)
    forged = (
        EventRow.objects.filter(tenant_id=tenant_id)
        .annotate(head=now)
        .filter(seq__gt=F("head"))
        .order_by("seq")
        .values_list("seq", flat=True)
        .first()
    )
    if forged is not None:
        return walk.broken(forged, HEAD_MISMATCH)
    return ChainReport(True, size - walk.start, size, walked_root, None, None)


def _unaccounted(tenant_id: str, kept: int) -> int | None:
    """The first event below the cut ``kept`` that no retirement accounts for: the newest
    ``audit.retired`` event kept must name the cut (its ``to_seq`` is ``kept - 1``)."""
    found = EventRow.objects.filter(tenant_id=tenant_id, kind=RETIRED, seq__gte=kept).order_by("-seq").first()
    try:
        said = json.loads(found.body)["to_seq"] if found is not None else 0
    except (ValueError, KeyError, TypeError):
        said = 0
    if said == kept - 1:
        return None
    return said + 1 if isinstance(said, int) and 0 <= said < kept - 1 else 1


class _Walk:
    """One pass over a tenant's events, checking as it goes."""

    COLUMNS = ("seq", "at", "actor", "kind", "body", "version", "prev_hash", "hash", "leaf_hash")
    CHUNK = 2000

    def __init__(
        self, tenant_id: str, *, checkpoints: dict[int, str | None], expect: tuple[int, str] | None
    ) -> None:
        self.tenant_id = tenant_id
        self.checkpoints = checkpoints
        self.expect = expect
        self.expect_met = False
        self.builder = TreeBuilder()
        self.start = 0
        """The leaves retired: the walk starts after them."""
        self.size = 0
        self.chain: str | None = GENESIS_HASH
        """The hash the next hash-chained event links to; None: the first one kept (any)."""
        self.chain_seq = 0
        self.chain_closed = False
        self.root_before = GENESIS_HASH
        """The root before the last event whose root was compared."""
        self.made: dict[tuple[int, int], bytes] = {}

    def broken(self, seq: int, reason: str) -> ChainReport:
        """The report of a break at ``seq``, everything before it verified (none, for a
        break at or below the cut)."""
        if seq <= self.start:
            return ChainReport(False, 0, 0, GENESIS_HASH, seq, reason)
        good = min(seq - 1, self.size)
        return ChainReport(False, good - self.start, good, self.walked_root(), seq, reason)

    def start_at(self, cut: int, *, head_chain_seq: int) -> ChainReport | None:
        """Start after the ``cut`` retired leaves, from their stored right edge, once every
        checkpoint at or below the cut (and the digest, if it is there) is shown a prefix of
        it; else the break. Kept events may be hash-chained only while the head's last
        chained event, ``head_chain_seq``, is kept."""
        read = _Nodes(self.tenant_id)
        try:
            edge = read(range_nodes(0, cut))
        except LookupError as exc:
            return self.broken(_first_leaf(exc.args[0]), NODE_MISMATCH)
        for node, h in zip(range_nodes(0, cut), edge, strict=True):
            if len(h) != 32:
                return self.broken(_first_leaf(node), NODE_MISMATCH)
        builder = TreeBuilder.from_edge(cut, edge)
        root = builder.root()
        below = sorted((size, cp_root) for size, cp_root in self.checkpoints.items() if size <= cut)
        bad = _first_not_prefix(read, cut, root, below)
        if bad is not None:
            return self.broken(*bad)
        if self.expect is not None and self.expect[0] <= cut:
            if _first_not_prefix(read, cut, root, [self.expect]) is None:
                self.expect_met = True
            elif self.expect[0] <= head_chain_seq:  # perhaps a chain hash: only the archive has it
                raise AuditRetiredError("", cut + 1)
            else:
                return self.broken(self.expect[0], "digest_mismatch")
        self.builder, self.start, self.size, self.root_before = builder, cut, cut, root.hex()
        self.chain, self.chain_closed = (None, False) if head_chain_seq > cut else (GENESIS_HASH, True)
        return None

    def walked_root(self) -> str:
        """The root over the events walked (:attr:`size` of them)."""
        if self.builder.size > self.size:  # past an event that failed a check after its leaf
            return self.root_before
        return self.builder.root().hex() if self.size else GENESIS_HASH

    def run(self, rows: Iterable[tuple[Any, ...]]) -> ChainReport | None:
        for row in rows:
            report = self.step(row)
            if report is not None:  # a stored subtree below this break may be the first
                nodes = self.check_nodes()
                earlier = nodes is not None and (nodes.first_bad_seq or 0) < (report.first_bad_seq or 0)
                return nodes if earlier and nodes is not None else report
            if len(self.made) >= 2 * self.CHUNK:
                report = self.check_nodes()
                if report is not None:
                    return report
        return self.check_nodes()

    def step(self, row: tuple[Any, ...]) -> ChainReport | None:
        seq, at, actor, kind, body_text, version, prev_hash, hash_, leaf_hex = row
        if seq <= self.start:  # a retired event, still (or again) in the live log
            return self.broken(seq, RETIRED_MISMATCH)
        if seq != self.size + 1:
            return self.broken(self.size + 1, "sequence_gap")
        try:
            body = json.loads(body_text)
            at_time = datetime.fromisoformat(at)
        except (TypeError, ValueError, RecursionError):
            return self.broken(seq, LEAF_MISMATCH)
        if version == LEGACY_CHAIN:
            if self.chain_closed:
                return self.broken(seq, VERSION_ORDER)
            if self.chain is not None and prev_hash != self.chain:
                return self.broken(seq, "prev_hash_mismatch")
            canonical = fast_canonical(self.tenant_id, seq, at_time, actor, kind, body)
            if not in_stored_form(at, body_text) or compute_hash(prev_hash, canonical) != hash_:
                return self.broken(seq, "hash_mismatch")
            self.chain, self.chain_seq = hash_, seq
        elif version == TREE_LEAF:
            if prev_hash or hash_:  # a leaf links to nothing: a link here was written by hand
                return self.broken(seq, "hash_mismatch")
            self.chain_closed = True
        else:
            return self.broken(seq, VERSION_ORDER)
        leaf = leaf_object(
            version=version,
            tenant_id=self.tenant_id,
            seq=seq,
            at=at,
            actor=actor,
            kind=kind,
            body=body,
            prev_hash=prev_hash,
            hash=hash_,
        )
        try:
            computed = object_leaf_hash(leaf)
        except ValueError:
            return self.broken(seq, LEAF_MISMATCH)
        if computed.hex() != leaf_hex:
            return self.broken(seq, LEAF_MISMATCH)
        # The root only where it is compared, at a checkpoint's size and at a kept digest's
        # number: taken after every event it was a large share of the walk
        # (docs/performance.md#audit-verify).
        rooted = seq in self.checkpoints or (self.expect is not None and self.expect[0] == seq)
        if rooted:
            self.root_before = self.walked_root()
        for level, index, h in self.builder.add(computed):
            self.made[(level, index)] = h
        if rooted:
            root = self.builder.root().hex()
            if seq in self.checkpoints and self.checkpoints[seq] != root:
                return self.broken(seq, CHECKPOINT_MISMATCH)
            if self.expect is not None and self.expect[0] == seq:
                self.expect_met = self.expect[1] == root or (
                    version == LEGACY_CHAIN and self.expect[1] == hash_
                )
                if not self.expect_met:
                    return self.broken(seq, "digest_mismatch")
        self.size = seq
        return None

    def check_nodes(self) -> ChainReport | None:
        """The stored subtree hashes completed by the leaves walked since the last check."""
        if not self.made:
            return None
        levels: dict[int, list[int]] = {}
        for level, index in self.made:
            levels.setdefault(level, []).append(index)
        where = Q()
        for level, indexes in levels.items():
            where |= Q(level=level, index__gte=min(indexes), index__lte=max(indexes))
        stored = {
            (level, index): bytes(h)
            for level, index, h in TreeNode.objects.filter(where, tenant_id=self.tenant_id).values_list(
                "level", "index", "hash"
            )
        }
        bad = [node for node, h in self.made.items() if stored.get(node) != h]
        self.made = {}
        if bad:
            # The lowest bad subtree says most precisely where the leaves and nodes part.
            level, index = min(bad)
            return self.broken((index << level) + 1, NODE_MISMATCH)
        return None


class _Nodes:
    """Reads a tenant's stored subtree hashes, a batch a query, keeping what it read."""

    def __init__(self, tenant_id: str) -> None:
        self.tenant_id = tenant_id
        self.known: dict[tuple[int, int], bytes] = {}

    def fetch(self, wanted: Iterable[tuple[int, int]]) -> None:
        """Read every node of ``wanted`` not read yet, in one query."""
        levels: dict[int, list[int]] = {}
        for level, index in {node for node in wanted if node not in self.known}:
            levels.setdefault(level, []).append(index)
        if not levels:
            return
        where = Q()
        for level, indexes in levels.items():
            where |= Q(level=level, index__in=indexes)
        rows = TreeNode.objects.filter(where, tenant_id=self.tenant_id).values_list("level", "index", "hash")
        self.known.update({(level, index): bytes(h) for level, index, h in rows})

    def __call__(self, wanted: Sequence[tuple[int, int]]) -> list[bytes]:
        self.fetch(wanted)
        try:
            return [self.known[node] for node in wanted]
        except KeyError as exc:
            raise LookupError(exc.args[0]) from exc


def _first_leaf(node: tuple[int, int]) -> int:
    """The number of the first event under the subtree ``(level, index)``."""
    level, index = node
    return (index << level) + 1


_PREFIXES_A_QUERY = 100
"""Consistency proofs whose stored hashes :func:`_first_not_prefix` reads in one query."""


def _first_not_prefix(
    read: _Nodes, cut: int, root: bytes, trees: Sequence[tuple[int, str | None]]
) -> tuple[int, str] | None:
    """The first of ``trees`` ((size, root hex or None: unverified), sizes at most ``cut``) that
    is not a prefix of the tree ``(cut, root)`` by a consistency proof from the stored
    hashes, as ``(size, reason)``; None when all are."""
    wanted: list[tuple[int, int]] = []

    def plan(nodes: Sequence[tuple[int, int]]) -> list[bytes]:
        wanted.extend(nodes)
        return [bytes(32)] * len(nodes)  # stand-ins: only which hashes a proof reads is wanted

    for start in range(0, len(trees), _PREFIXES_A_QUERY):
        chunk = trees[start : start + _PREFIXES_A_QUERY]
        wanted.clear()
        for size, _ in chunk:
            if 0 < size < cut:
                consistency_proof(size, cut, plan)
        read.fetch(wanted)
        for size, said in chunk:
            if said is None:
                return size, CHECKPOINT_MISMATCH
            try:
                proof = consistency_proof(size, cut, read) if size < cut else []
                check_consistency(size, cut, bytes.fromhex(said), root, proof)
            except LookupError as exc:
                return _first_leaf(exc.args[0]), NODE_MISMATCH
            except (ProofError, ValueError):
                return size, CHECKPOINT_MISMATCH
    return None


def _checkpoint_roots(tenant_id: str, size: int) -> dict[int, str | None]:
    """The tenant's checkpoints up to ``size``: their roots, or None where one does not verify."""
    key = log_verifier_key(tenant_id)
    roots: dict[int, str | None] = {}
    for cp_size, note in Checkpoint.objects.filter(tenant_id=tenant_id, size__lte=size).values_list(
        "size", "note"
    ):
        try:
            body = parse_checkpoint(open_note(note, [key])[0])
        except NoteError:
            roots[cp_size] = None
            continue
        roots[cp_size] = body.root.hex() if body.size == cp_size and body.origin == key.name else None
    return roots
