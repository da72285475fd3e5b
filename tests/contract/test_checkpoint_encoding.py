"""The SQLite checkpoint store keeps each checkpoint deflated against the one before it.

What is pinned is what a caller sees: ``load`` and ``history`` give back exactly the JSON
that was saved, across keyframes, after a reopen, for rows of files written before the
encoding, and after a save whose memo was wrong; a damaged row raises instead of giving
a wrong state. The stored columns are looked at only to prove the rows are small and
that keyframes fall where they should.
"""

from __future__ import annotations

import sqlite3
import zlib
from datetime import UTC, datetime
from pathlib import Path

import pytest

from keelgate.checkpoint import CheckpointCodec, SqliteCheckpointStore, StoredCheckpoint
from keelgate.errors import CheckpointUnreadableError, StaleCheckpointError
from keelgate.loop import LoopState, Phase
from keelgate.sqlite import SqliteDatabase

_AS_OF = datetime(2026, 1, 1, tzinfo=UTC)
_PHASES = [Phase.PLAN, Phase.ACT, Phase.OBSERVE, Phase.VERIFY]


def grown(run_id: str, seq: int, *, tenant_id: str = "t1", note: str = "") -> LoopState:
    """A state that changes a little and grows at every seq, as a run's do."""
    return LoopState(
        tenant_id=tenant_id,
        run_id=run_id,
        agent_id="agent-1",
        goal="buy 10 ACME — ünïcode ✓",
        as_of=_AS_OF,
        trace_id="trace-1",
        seq=seq,
        iteration=seq // 4,
        phase=_PHASES[seq % 4],
        final_answer=" ".join(f"step {i}: quote {100 + i * 0.5}" for i in range(seq)) + note,
    )


def rows(path: Path, run_id: str) -> list[tuple[int, int | None, bytes | None, str]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(
            "SELECT seq, base_seq, data, state FROM checkpoints WHERE run_id = ? ORDER BY seq", (run_id,)
        ).fetchall()
    finally:
        conn.close()


def test_a_long_run_reads_back_byte_for_byte_across_keyframes(tmp_path: Path) -> None:
    """40 saves: every load and the history equal the saved JSON; a keyframe every 16; rows small."""
    path = tmp_path / "c.db"
    saved = []
    with SqliteCheckpointStore(path) as store:
        for seq in range(1, 41):
            state = grown("r", seq)
            store.save(state)
            saved.append(state.to_json())
            loaded = store.load("t1", "r")
            assert loaded is not None and loaded.to_json() == saved[-1]
        assert [s.to_json() for s in store.history("t1", "r")] == saved
    with SqliteCheckpointStore(path) as reopened:  # a new process: no memo
        assert [s.to_json() for s in reopened.history("t1", "r")] == saved
        assert reopened.load("t1", "r").to_json() == saved[-1]
    stored = rows(path, "r")
    keyframes = [seq for seq, base, _, _ in stored if base is None]
    assert keyframes == [1, 17, 33]
    assert all(base == seq - 1 for seq, base, _, _ in stored if base is not None)
    assert all(text == "" for *_, text in stored)
    assert zlib.decompress(stored[16][2]).decode() == saved[16]  # a keyframe inflates alone
    json_bytes = sum(len(t.encode()) for t in saved)
    assert sum(len(data) for _, _, data, _ in stored) < json_bytes / 5


def test_a_load_continues_the_chain_and_a_store_that_never_read_starts_a_keyframe(tmp_path: Path) -> None:
    """After ``load`` the next save is a delta; a fresh store's first save is a keyframe; both read back."""
    path = tmp_path / "c.db"
    saved = []
    with SqliteCheckpointStore(path) as store:
        for seq in (1, 2, 3):
            store.save(grown("r", seq))
            saved.append(grown("r", seq).to_json())
    with SqliteCheckpointStore(path) as resumed:
        resumed.load("t1", "r")
        resumed.save(grown("r", 4))
        saved.append(grown("r", 4).to_json())
    with SqliteCheckpointStore(path) as blind:
        blind.save(grown("r", 5))
        saved.append(grown("r", 5).to_json())
        assert [s.to_json() for s in blind.history("t1", "r")] == saved
    assert [(seq, base) for seq, base, _, _ in rows(path, "r")] == [
        (1, None),
        (2, 1),
        (3, 2),
        (4, 3),
        (5, None),
    ]


def test_rows_of_a_file_written_before_the_encoding_still_read(tmp_path: Path) -> None:
    """An old file (plain JSON, no encoding columns) gains the columns; old and new rows read back."""
    path = tmp_path / "old.db"
    old = [grown("r", seq) for seq in (1, 2, 3)]
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE checkpoints (
            tenant_id TEXT NOT NULL, run_id TEXT NOT NULL, seq INTEGER NOT NULL, phase TEXT NOT NULL,
            trace_id TEXT NOT NULL, state TEXT NOT NULL, saved_at TEXT NOT NULL,
            PRIMARY KEY (tenant_id, run_id, seq)
        );
        CREATE TABLE runs (
            tenant_id TEXT NOT NULL, run_id TEXT NOT NULL, trace_id TEXT NOT NULL,
            latest_seq INTEGER NOT NULL, created INTEGER NOT NULL, PRIMARY KEY (tenant_id, run_id)
        );
        """
    )
    for s in old:
        conn.execute(
            "INSERT INTO checkpoints VALUES (?, ?, ?, ?, ?, ?, ?)",
            ("t1", "r", s.seq, str(s.phase), s.trace_id, s.to_json(), _AS_OF.isoformat()),
        )
    conn.execute("INSERT INTO runs VALUES ('t1', 'r', 'trace-1', 3, 1)")
    conn.commit()
    conn.close()
    with SqliteCheckpointStore(path) as store:
        assert store.load("t1", "r").to_json() == old[-1].to_json()
        store.save(grown("r", 4))
        store.save(grown("r", 5))
        assert [s.to_json() for s in store.history("t1", "r")] == [
            *(s.to_json() for s in old),
            grown("r", 4).to_json(),
            grown("r", 5).to_json(),
        ]
        assert store.runs("t1") == ["r"]
    # An old row has no zlib tail for a delta's base check: the first new row is a keyframe.
    assert [(seq, base) for seq, base, _, _ in rows(path, "r")][3:] == [(4, None), (5, 4)]


@pytest.mark.parametrize("damage", ["flip", "truncate", "foreign"])
def test_a_damaged_row_raises_checkpoint_unreadable_instead_of_a_wrong_state(
    tmp_path: Path, damage: str
) -> None:
    """A changed byte, a cut stream or another run's bytes: load and history raise, never guess."""
    path = tmp_path / "c.db"
    with SqliteCheckpointStore(path) as store:
        for seq in range(1, 6):
            store.save(grown("r", seq))
            store.save(grown("other", seq, note=" elsewhere"))
    conn = sqlite3.connect(path)
    (data,) = conn.execute("SELECT data FROM checkpoints WHERE run_id = 'r' AND seq = 3").fetchone()
    if damage == "flip":
        data = data[:10] + bytes([data[10] ^ 0x40]) + data[11:]
    elif damage == "truncate":
        data = data[:-5]
    else:
        (data,) = conn.execute("SELECT data FROM checkpoints WHERE run_id = 'other' AND seq = 3").fetchone()
    conn.execute("UPDATE checkpoints SET data = ? WHERE run_id = 'r' AND seq = 3", (data,))
    conn.commit()
    conn.close()
    with SqliteCheckpointStore(path) as store:
        with pytest.raises(CheckpointUnreadableError) as caught:
            store.load("t1", "r")
        assert "r seq 3" in caught.value.detail
        with pytest.raises(CheckpointUnreadableError):
            store.history("t1", "r")
        assert store.load("t1", "other").to_json() == grown("other", 5, note=" elsewhere").to_json()


def test_a_memo_of_a_discarded_group_or_a_foreign_writer_falls_back_to_a_keyframe(tmp_path: Path) -> None:
    """The memo is only a hint: a base that is not stored gives a keyframe; a foreign save between is fine.

    A delta may skip a row another writer saved in between: it names its own base, which
    is stored, and every read follows it.
    """
    path = tmp_path / "c.db"
    db = SqliteDatabase(path)
    store = SqliteCheckpointStore(db)
    try:
        store.save(grown("r", 1))
        store.save(grown("r", 2))
        db.hold()
        store.save(grown("r", 3, note=" rolled back"))  # the memo now holds this text
        db.discard()
        store.save(grown("r", 4))  # based on seq 3 by the memo, but row 3 is not there
        with SqliteCheckpointStore(path) as other:  # a second writer (no fence here) moves the run on
            other.load("t1", "r")
            other.save(grown("r", 5))
        store.save(grown("r", 6))  # the memo says 4 (stored), the latest row is 5
        expected = [grown("r", seq).to_json() for seq in (1, 2, 4, 5, 6)]
        assert [s.to_json() for s in store.history("t1", "r")] == expected
        with SqliteCheckpointStore(path) as reader:
            assert [s.to_json() for s in reader.history("t1", "r")] == expected
            assert reader.load("t1", "r").to_json() == expected[-1]
    finally:
        store.close()
        db.close()
    assert [(seq, base) for seq, base, _, _ in rows(path, "r")] == [
        (1, None),
        (2, 1),
        (4, None),
        (5, 4),
        (6, 4),
    ]


def test_a_stale_save_still_raises_and_stores_nothing(tmp_path: Path) -> None:
    """The refusal is unchanged, and the refused text never becomes a base."""
    path = tmp_path / "c.db"
    with SqliteCheckpointStore(path) as a, SqliteCheckpointStore(path) as b:
        a.save(grown("r", 1))
        b.load("t1", "r")
        a.save(grown("r", 2))
        with pytest.raises(StaleCheckpointError):
            b.save(grown("r", 2, note=" loser"))
        b.save(grown("r", 3))
        assert [s.to_json() for s in a.history("t1", "r")] == [grown("r", seq).to_json() for seq in (1, 2, 3)]
    assert len(rows(path, "r")) == 3


def test_the_codec_refuses_a_delta_whose_base_it_was_not_given() -> None:
    """Decoding from the middle of a chain is an error, never a guess."""
    codec = CheckpointCodec(keyframe_every=4)
    first = codec.encode("t1", "r", 1, "x" * 300)
    second = codec.encode("t1", "r", 2, "x" * 300 + "y")
    assert (first.base_seq, second.base_seq) == (None, 1)
    assert second.base_tail == first.data[-4:]
    reader = CheckpointCodec()
    assert reader.decode(
        "t1", "r", [StoredCheckpoint(1, None, first.data), StoredCheckpoint(2, 1, second.data)]
    ) == [
        "x" * 300,
        "x" * 300 + "y",
    ]
    with pytest.raises(CheckpointUnreadableError):
        reader.decode("t1", "r", [StoredCheckpoint(2, 1, second.data)])
    assert reader.decode("t1", "r", [StoredCheckpoint(7, None, None, "plain")]) == ["plain"]
    with pytest.raises(ValueError):
        CheckpointCodec(keyframe_every=0)
