"""A tenant's log as C2SP ``tlog-tiles``: hash tiles and entry bundles anyone can mirror.

The spec (https://c2sp.org/tlog-tiles) serves a log as static resources under a URL
*prefix*: the signed checkpoint, *tiles* of the Merkle tree (the 256 hashes of one row
of a subtree of height 8) and *entry bundles* (the leaves' data, 256 to a bundle). A
client such as Go's ``tlog.TileHashReader`` fetches the few it needs and computes any
proof itself, checking each tile against the signed root.

Tile ``(L, N)`` is the hashes at tree level ``8 * L`` numbered ``N * 256`` to
``N * 256 + W - 1``: complete subtrees, which :mod:`audit.tree` stores for every level
(``TreeNode``) as it sequences, so a tile is one range read of the unique index. A
*partial* tile (``.p/W``, W below 256) is the right edge of a tree whose size is not a
multiple of the tile's span. An entry bundle is leaves ``N * 256`` onwards, each a
big-endian uint16 length and the leaf's data: the RFC 8785 bytes of the event's leaf
object (:func:`audit.tree.event_leaf`), whose hash is the level 0 tile's.

What is served is bounded by the tenant's newest signed checkpoint, never the live
head: a client must verify a checkpoint before it may ask for a partial tile, and any
tile or bundle the checkpoint's tree holds is served (partial ones of every width up to
it, so those of every earlier checkpoint too). Beyond it, or in a path that is not the
spec's one encoding of its tile, the answer is 404. A tile's content never changes once
it can be served (complete subtrees are never rewritten), so it may be cached for good.

Pruning is the spec's: retiring events (:mod:`audit.retention`) deletes them below a cut
and keeps every hash, so every hash tile is still served, while a bundle holding a
retired entry is 410 ``audit_retired`` (:mod:`audit.retired`; its archive holds it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from audit.models import AuditEvent as EventRow
from audit.models import Checkpoint, TreeNode
from audit.retired import first_kept
from audit.tree import event_leaf
from keelgate.audit import leaf_bytes
from sitekit.errors import AuditEntryTooLargeError, AuditRetiredError, NotFoundError

__all__ = [
    "ENTRIES",
    "MAX_ENTRY",
    "TILE_HEIGHT",
    "TILE_WIDTH",
    "Tile",
    "checkpoint_size",
    "entry_bundle",
    "hash_tile",
    "in_tree",
    "parse_tile_path",
]

TILE_HEIGHT = 8
"""Levels of the tree one tile spans (the spec fixes it at 8)."""
TILE_WIDTH = 1 << TILE_HEIGHT
"""Hashes in a full tile, entries in a full bundle."""
ENTRIES = -1
"""The level of an entry bundle (Go's ``tlog`` numbers its data tiles so too)."""
MAX_LEVEL = 63
"""The highest tile level the spec allows."""
MAX_ENTRY = 0xFFFF
"""The longest leaf a bundle can carry: its length is a uint16."""

_PATH = re.compile(
    r"tile/(?P<level>entries|0|[1-9][0-9]?)/(?P<index>(?:x[0-9]{3}/){0,6}[0-9]{3})(?:\.p/(?P<width>[1-9][0-9]{0,2}))?"
)
"""The spec's grammar, before its ranges: ``L`` and ``W`` without leading zeros, ``N`` in
three-digit elements (seven at most, more than a tile of a tree below 2**63 leaves needs)."""


@dataclass(frozen=True)
class Tile:
    """A tile (``level`` 0 to 63) or an entry bundle (``level`` :data:`ENTRIES`): its
    ``index`` within the level and its ``width``, 256 for a full one."""

    level: int
    index: int
    width: int = TILE_WIDTH

    @property
    def path(self) -> str:
        """``tile/<L>/<N>[.p/<W>]`` or ``tile/entries/<N>[.p/<W>]``: the spec's one encoding."""
        level = "entries" if self.level == ENTRIES else str(self.level)
        partial = f".p/{self.width}" if self.width != TILE_WIDTH else ""
        return f"tile/{level}/{_index_path(self.index)}{partial}"

    @property
    def start(self) -> int:
        """The first number this tile holds at its own level (a leaf's index, for a bundle)."""
        return self.index * TILE_WIDTH

    @property
    def end(self) -> int:
        """One past the last number it holds at its own level."""
        return self.start + self.width


def _index_path(index: int) -> str:
    """``N`` as three-digit path elements, all but the last with an ``x``: 1234067 is ``x001/x234/067``."""
    groups = [f"{index % 1000:03d}"]
    index //= 1000
    while index:
        groups.append(f"x{index % 1000:03d}")
        index //= 1000
    return "/".join(reversed(groups))


def parse_tile_path(path: str) -> Tile:
    """The tile ``path`` names (``tile/0/x001/234.p/5``); :class:`NotFoundError` unless it is
    the spec's encoding of one: a level from 0 to 63 or ``entries``, a width from 1 to 255,
    no leading zeros, no other spelling of the same tile (``x000/001`` is ``001``'s)."""
    found = _PATH.fullmatch(path)
    if found is None:
        raise NotFoundError()
    level = ENTRIES if found["level"] == "entries" else int(found["level"])
    width = int(found["width"]) if found["width"] else TILE_WIDTH
    tile = Tile(level, int(found["index"].replace("x", "").replace("/", "")), width)
    if level > MAX_LEVEL or (found["width"] and width >= TILE_WIDTH) or tile.path != path:
        raise NotFoundError()
    return tile


def checkpoint_size(tenant_id: str) -> int:
    """The tree size of the tenant's newest signed checkpoint (0 before the first)."""
    size = Checkpoint.objects.filter(tenant_id=tenant_id).order_by("-size").values_list("size", flat=True)
    return int(size.first() or 0)


def in_tree(tile: Tile, size: int) -> bool:
    """Whether the tree of ``size`` leaves holds the tile whole: at the tile's level it has
    ``size >> 8L`` complete subtrees (a bundle's level is the leaves'), and the tile needs
    ``tile.end`` of them."""
    return tile.end <= size >> (TILE_HEIGHT * max(tile.level, 0))


def _served(tile: Tile, tenant_id: str) -> None:
    """Refuse (404) a tile the tenant's newest checkpoint does not hold whole."""
    if not in_tree(tile, checkpoint_size(tenant_id)):
        raise NotFoundError()


def hash_tile(tenant_id: str, tile: Tile) -> bytes:
    """The tile's hashes, concatenated (``32 * width`` bytes), from one range read of the
    stored subtrees; :class:`NotFoundError` for a bundle or a tile beyond the newest
    checkpoint. Served below a retention cut too: retiring keeps every hash.

    Raises LookupError if a hash the tree must hold is not stored: a damaged store
    (``verify_audit`` says where), never served as a short tile.
    """
    if tile.level == ENTRIES:
        raise NotFoundError()
    _served(tile, tenant_id)
    rows = TreeNode.objects.filter(
        tenant_id=tenant_id, level=TILE_HEIGHT * tile.level, index__gte=tile.start, index__lt=tile.end
    )
    hashes = [bytes(h) for h in rows.order_by("index").values_list("hash", flat=True)]
    if len(hashes) != tile.width or any(len(h) != 32 for h in hashes):
        raise LookupError(f"tenant {tenant_id}: {tile.path} has {len(hashes)} of its {tile.width} hashes")
    return b"".join(hashes)


def entry_bundle(tenant_id: str, tile: Tile) -> bytes:
    """The bundle's entries, each a big-endian uint16 length and the leaf's RFC 8785
    bytes, from one read of its events.

    :class:`NotFoundError` for a hash tile or a bundle beyond the newest checkpoint;
    :class:`AuditRetiredError` for one that holds a retired entry (the minimum index is
    the first kept event's leaf: a bundle across the cut cannot be written whole);
    :class:`AuditEntryTooLargeError` for one holding a leaf longer than a uint16 counts.
    """
    if tile.level != ENTRIES:
        raise NotFoundError()
    _served(tile, tenant_id)
    kept = first_kept(tenant_id)
    if tile.start < kept - 1:  # event seq n is leaf n - 1
        raise AuditRetiredError("", kept)
    rows = EventRow.objects.filter(tenant_id=tenant_id, seq__gt=tile.start, seq__lte=tile.end).order_by("seq")
    out = bytearray()
    count = 0
    for row in rows:
        if row.seq != tile.start + count + 1:
            raise LookupError(f"tenant {tenant_id}: event {tile.start + count + 1} of {tile.path} is missing")
        data = leaf_bytes(event_leaf(row))
        if len(data) > MAX_ENTRY:
            raise AuditEntryTooLargeError(row.seq, len(data))
        out += len(data).to_bytes(2, "big") + data
        count += 1
    if count != tile.width:
        raise LookupError(f"tenant {tenant_id}: {tile.path} has {count} of its {tile.width} events")
    return bytes(out)
