"""Verifying a tenant's log in the database: the chain before the cut-over, the tree throughout.

One pass over the events the head counts, in order, checks: numbers 1, 2, 3, ...; the
hash-chained events (``version`` 1) first, each linking to the one before; every
event's leaf hash recomputed from its fields (RFC 8785 bytes); every stored subtree hash
recomputed from the leaves; the root at every signed checkpoint (whose signature must
verify) and at the head. Then no numbered event may lie beyond the head. The first
break is reported with its number and a reason, so ``verify_audit`` and the page can
name the first bad event.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from django.db.models import Q

from audit.checkpoints import log_verifier_key
from audit.digest import verify_digest
from audit.models import LEGACY_CHAIN, TREE_LEAF, ChainHead, Checkpoint, TreeNode
from audit.models import AuditEvent as EventRow
from audit.wiring import integrate_pending
from keelgate.audit import (
    GENESIS_HASH,
    ChainReport,
    NoteError,
    TreeBuilder,
    compute_hash,
    fast_canonical,
    in_stored_form,
    leaf_object,
    object_leaf_hash,
    open_note,
    parse_checkpoint,
)
from sitekit.errors import DigestError

__all__ = [
    "CHECKPOINT_MISMATCH",
    "HEAD_MISMATCH",
    "LEAF_MISMATCH",
    "NODE_MISMATCH",
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


def verify_log(*, tenant_id: str, against: Mapping[str, Any] | None = None) -> ChainReport:
    """Verify ``tenant_id``'s log and report the first break (see the module).

    The report's ``head_hash`` is the tree's root at ``head_seq``. With ``against`` (a
    digest from :func:`audit.digest.sign_head`), the digest is checked first (raising
    :class:`~sitekit.errors.DigestError` if it is malformed, for another tenant or not
    signed by this site) and the log must still hold it: the root at its ``seq``, or for
    a digest signed before the tree, the chain hash there (``digest_mismatch``).
    Safe to run while others append: it walks what the head counted when it began.
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
    walk = _Walk(tenant_id, checkpoints=_checkpoint_roots(tenant_id, size), expect=expect)
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
    if size and walk.builder.root().hex() != root:
        return walk.broken(size, ROOT_MISMATCH)
    if expect is not None and not walk.expect_met:
        return walk.broken(expect[0], "digest_mismatch")
    if head is not None and (head.chain_seq, head.hash if head.chain_seq else GENESIS_HASH) != (
        walk.chain_seq,
        walk.chain,
    ):  # the head names the last hash-chained event: the cut-over
        return walk.broken(min(head.chain_seq, walk.chain_seq) + 1, HEAD_MISMATCH)
    now = ChainHead.objects.filter(tenant_id=tenant_id).values_list("seq", flat=True).first() or 0
    if Checkpoint.objects.filter(tenant_id=tenant_id, size__gt=max(now, size)).exists():
        # A signed checkpoint of a bigger tree than there is: the log was cut back.
        return walk.broken(max(now, size) + 1, CHECKPOINT_MISMATCH)
    forged = (
        EventRow.objects.filter(tenant_id=tenant_id, seq__gt=max(now, size))
        .order_by("seq")
        .values_list("seq", flat=True)
        .first()
    )
    if forged is not None:
        return walk.broken(forged, HEAD_MISMATCH)
    return ChainReport(True, size, size, walk.builder.root().hex() if size else GENESIS_HASH, None, None)


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
        self.size = 0
        self.chain = GENESIS_HASH
        self.chain_seq = 0
        self.chain_closed = False
        self.good_root = GENESIS_HASH
        self.made: dict[tuple[int, int], bytes] = {}

    def broken(self, seq: int, reason: str) -> ChainReport:
        """The report of a break at ``seq``, everything before it verified."""
        good = min(seq - 1, self.size)
        return ChainReport(False, good, good, self.good_root, seq, reason)

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
            if prev_hash != self.chain:
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
        for level, index, h in self.builder.add(computed):
            self.made[(level, index)] = h
        root = self.builder.root().hex()
        if seq in self.checkpoints and self.checkpoints[seq] != root:
            return self.broken(seq, CHECKPOINT_MISMATCH)
        if self.expect is not None and self.expect[0] == seq:
            self.expect_met = self.expect[1] == root or (version == LEGACY_CHAIN and self.expect[1] == hash_)
            if not self.expect_met:
                return self.broken(seq, "digest_mismatch")
        self.size, self.good_root = seq, root
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
