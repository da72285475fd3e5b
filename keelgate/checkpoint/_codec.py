"""How the durable stores keep a checkpoint small: zlib, against the run's previous checkpoint.

A checkpoint is the whole :meth:`LoopState.to_json` text, and consecutive checkpoints
of one run differ by a few fields: most of every text is the one before it. So each
text is deflated with the previous text of the same run as zlib's preset dictionary
(a *delta*, which stores roughly only what changed), and every ``keyframe_every``
saves, or whenever the store does not know the previous text, without one (a
*keyframe*). Decoding is exact: the stores give back byte for byte the JSON they were
given, so runs still move between stores as JSON, and replay sees what was saved.

A stored row names what it was encoded against (``base_seq``, None for a keyframe),
and the stores insert a delta only if its base row is stored and ends with the same
four bytes (zlib's Adler-32 trailer, the checksum of the base's text, which is also
the dictionary id the delta carries), in the insert's own statement. The in-process
memo of the last text is only a hint: a memo left by a rolled-back or refused save
cannot produce a row that decodes wrongly, the insert falls back to a keyframe
instead. Reading a run decodes from its newest keyframe, following each row's base;
zlib checks every output against its checksum, so a damaged row raises
:class:`~keelgate.errors.CheckpointUnreadableError` instead of giving a wrong state.

Rows written before this encoding hold plain JSON (no data) and read as keyframes.
"""

from __future__ import annotations

import threading
import zlib
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

from keelgate.errors import CheckpointUnreadableError

__all__ = ["CheckpointCodec", "EncodedCheckpoint", "StoredCheckpoint"]

KEYFRAME_EVERY = 16
"""A keyframe at least every this many saves of a run: it bounds what a load decodes."""

_MEMO_RUNS = 512
"""Runs whose last text a codec remembers (a worker moves on; the oldest are forgotten)."""

_LEVEL = 6  # zlib's default: level 1 stores more, saves little time (docs/performance.md#checkpoint-deltas)
_MEM_LEVEL = 5
"""A smaller hash table than zlib's default: as small here (texts of kilobytes), cheaper to set up."""


@dataclass(frozen=True, slots=True)
class EncodedCheckpoint:
    """One checkpoint as a store inserts it."""

    data: bytes
    """The zlib stream of the JSON text."""
    base_seq: int | None
    """The seq of the row it was deflated against; None for a keyframe."""
    base_tail: bytes | None
    """The last four bytes the base row's ``data`` must end with (None for a keyframe)."""


@dataclass(frozen=True, slots=True)
class StoredCheckpoint:
    """One stored row as a store reads it back, to decode."""

    seq: int
    base_seq: int | None
    data: bytes | None
    """The zlib stream; None for a row written before the encoding (``text`` holds it)."""
    text: str = ""
    """Plain JSON of an old row (ignored when ``data`` is set)."""


@dataclass(frozen=True, slots=True)
class _Last:
    seq: int
    text: bytes
    data: bytes
    depth: int
    """Deltas since the keyframe this text decodes from (0: it is the keyframe)."""


class CheckpointCodec:
    """Encodes a store's checkpoints and decodes them, remembering each run's last text.

    One per store object; thread-safe. ``encode`` never reads the database: the base
    is the last text this codec saved or read for the run.
    """

    def __init__(self, *, keyframe_every: int = KEYFRAME_EVERY, memo_runs: int = _MEMO_RUNS) -> None:
        if keyframe_every < 1:
            raise ValueError("keyframe_every must be at least 1")
        self.keyframe_every = keyframe_every
        self._memo_runs = memo_runs
        self._last: OrderedDict[tuple[str, str], _Last] = OrderedDict()
        self._lock = threading.Lock()

    def encode(self, tenant_id: str, run_id: str, seq: int, text: str) -> EncodedCheckpoint:
        """A delta against the run's last known text if there is one to use, else a keyframe."""
        key = (tenant_id, run_id)
        raw = text.encode()
        with self._lock:
            last = self._last.get(key)
        if last is None or last.seq >= seq or last.depth + 1 >= self.keyframe_every:
            data = _deflate(raw, None)
            self._remember(key, _Last(seq, raw, data, 0))
            return EncodedCheckpoint(data, None, None)
        data = _deflate(raw, last.text)
        self._remember(key, _Last(seq, raw, data, last.depth + 1))
        return EncodedCheckpoint(data, last.seq, last.data[-4:])

    def keyframe(self, tenant_id: str, run_id: str, seq: int, text: str) -> bytes:
        """The text deflated alone, for a save whose delta the store refused, or a re-key."""
        raw = text.encode()
        data = _deflate(raw, None)
        self._remember((tenant_id, run_id), _Last(seq, raw, data, 0))
        return data

    def forget(self, tenant_id: str, run_id: str) -> None:
        """Drop the run's memo (a refused save): its next save is a keyframe."""
        with self._lock:
            self._last.pop((tenant_id, run_id), None)

    def decode(
        self, tenant_id: str, run_id: str, rows: Iterable[StoredCheckpoint], *, latest: bool = True
    ) -> list[str]:
        """The JSON texts of ``rows`` (oldest first, from a keyframe), exactly as saved.

        ``latest``: the last row is the run's latest, so it becomes the memo that the
        next save is encoded against. Raises :class:`CheckpointUnreadableError` for a
        row that does not decode, or whose base is not among the rows before it.
        """
        texts: dict[int, tuple[bytes, int]] = {}
        out: list[str] = []
        last: _Last | None = None
        for row in rows:
            if row.data is None:
                raw, depth, data = row.text.encode(), 0, b""
            elif row.base_seq is None:
                raw, depth, data = _inflate(run_id, row, None), 0, row.data
            else:
                base = texts.get(row.base_seq)
                if base is None:
                    raise CheckpointUnreadableError(
                        f"{run_id} seq {row.seq}: its base seq {row.base_seq} was not read"
                    )
                raw, depth, data = _inflate(run_id, row, base[0]), base[1] + 1, row.data
            texts[row.seq] = (raw, depth)
            try:
                out.append(raw.decode())
            except UnicodeDecodeError as exc:
                raise CheckpointUnreadableError(f"{run_id} seq {row.seq}: not UTF-8") from exc
            last = _Last(row.seq, raw, data, depth)
        if latest and last is not None:
            if last.data:
                self._remember((tenant_id, run_id), last)
            else:  # an old plain row: no stored tail for a delta's base check to find
                self.forget(tenant_id, run_id)
        return out

    def _remember(self, key: tuple[str, str], last: _Last) -> None:
        with self._lock:
            self._last[key] = last
            self._last.move_to_end(key)
            while len(self._last) > self._memo_runs:
                self._last.popitem(last=False)


def _deflate(raw: bytes, base: bytes | None) -> bytes:
    """``raw`` as one zlib stream, with ``base`` as its preset dictionary if given.

    The window is the smallest that still reaches back over the base and the text (at
    most zlib's 32 kB): deflate's state is four times its window plus the hash table,
    and the default state, allocated and zeroed afresh at every save, cost more than
    the compression itself (docs/performance.md#checkpoint-deltas). Any zlib inflater
    reads a smaller window.
    """
    if base is None:
        deflater = zlib.compressobj(_LEVEL, zlib.DEFLATED, _window(len(raw)), _MEM_LEVEL)
    else:
        window = _window(len(raw) + len(base))
        deflater = zlib.compressobj(_LEVEL, zlib.DEFLATED, window, _MEM_LEVEL, zdict=base)
    return deflater.compress(raw) + deflater.flush()


def _window(size: int) -> int:
    """The smallest window bits (9..15) whose window covers ``size`` bytes and deflate's lookahead."""
    bits = 9
    while bits < 15 and (1 << bits) < size + 262:
        bits += 1
    return bits


def _inflate(run_id: str, row: StoredCheckpoint, base: bytes | None) -> bytes:
    assert row.data is not None
    try:
        inflater = zlib.decompressobj(zdict=base) if base is not None else zlib.decompressobj()
        raw = inflater.decompress(row.data) + inflater.flush()
    except zlib.error as exc:
        raise CheckpointUnreadableError(f"{run_id} seq {row.seq}: {exc}") from exc
    if not inflater.eof or inflater.unused_data:
        raise CheckpointUnreadableError(f"{run_id} seq {row.seq}: not one complete zlib stream")
    return raw
