"""The Django checkpoint store keeps each checkpoint deflated against the one before it.

Pinned is what every reader sees: the store's ``load`` and ``history``, the run pages'
selectors and pruning give back exactly the saved JSON, for a long run across keyframes,
for rows saved before the encoding, after a save whose memo was wrong (it is stored
whole, in the same round trip's check on PostgreSQL), and after pruning removed the
rows the oldest kept one was based on. A damaged row raises. On SQLite and PostgreSQL.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from keelgate.errors import CheckpointUnreadableError, StaleCheckpointError
from runs.engine.fencing import Fence
from runs.engine.loops import database_stores
from runs.engine.stores import DjangoCheckpointStore
from runs.models import Checkpoint, Run, RunStatus
from runs.selectors import run_state, run_summaries, run_timeline
from runs.services import checkpoints_prune
from tests.contract.test_checkpoint_encoding import grown
from tests.site.runs._batch import require_postgres

pytestmark = pytest.mark.django_db(transaction=True)


def _run(run_id: str = "r", status: str = RunStatus.RUNNING) -> Run:
    first = grown(run_id, 1)
    return Run.objects.create(
        tenant_id="t1",
        run_id=run_id,
        agent="trader",
        goal=first.goal,
        as_of=first.as_of,
        trace_id=first.trace_id,
        status=status,
    )


def _saves(store: DjangoCheckpointStore, run_id: str, seqs: range) -> list[str]:
    texts = []
    for seq in seqs:
        state = grown(run_id, seq)
        store.save(state)
        texts.append(state.to_json())
    return texts


def _stored(run_id: str = "r") -> list[tuple[int, int | None]]:
    rows = Checkpoint.objects.filter(run_id=run_id).order_by("seq")
    return list(rows.values_list("seq", "base_seq"))


def _history(run_id: str = "r") -> list[str]:
    return [s.to_json() for s in DjangoCheckpointStore().history("t1", run_id)]


def test_a_long_run_reads_back_byte_for_byte_everywhere(operator) -> None:
    """40 saves: load after each, history, a fresh store, the timeline and the run list: the saved JSON."""
    run = _run()
    store = DjangoCheckpointStore()
    saved = []
    for seq in range(1, 41):
        saved += _saves(store, "r", range(seq, seq + 1))
        assert store.load("t1", "r").to_json() == saved[-1]
    assert [s.to_json() for s in store.history("t1", "r")] == saved
    assert _history() == saved
    assert DjangoCheckpointStore().load("t1", "r").to_json() == saved[-1]

    run.refresh_from_db()
    assert run.seq == 40
    assert run_state(run).to_json() == saved[-1]
    window = run_timeline(run, after_seq=10, limit=5)
    assert [(e.seq, e.state.to_json()) for e in window] == list(zip(range(11, 16), saved[10:15], strict=True))
    assert [e.state.to_json() for e in run_timeline(run, after_seq=30)] == saved[30:]
    assert [e.state.to_json() for e in run_timeline(run)] == saved
    other = _saves(DjangoCheckpointStore(), "q", range(1, 4))
    assert Checkpoint.objects.texts_at([("t1", "r", 25), ("t1", "q", 3)]) == {
        ("t1", "r"): saved[24],
        ("t1", "q"): other[-1],
    }
    [summary] = run_summaries([run])
    assert summary.run == run

    stored = _stored()
    assert [seq for seq, base in stored if base is None] == [1, 17, 33]
    assert all(base == seq - 1 for seq, base in stored if base is not None)
    rows = Checkpoint.objects.filter(run_id="r").values_list("state", "data")
    assert {text for text, _ in rows} == {""}
    assert sum(len(data) for _, data in rows) < sum(len(t.encode()) for t in saved) / 5


def test_rows_saved_before_the_encoding_still_read(operator) -> None:
    """Plain JSON rows (the migration kept them) load, page and continue; the next save is a keyframe."""
    run = _run()
    old = [grown("r", seq) for seq in (1, 2, 3)]
    Checkpoint.objects.bulk_create(
        Checkpoint(
            tenant_id="t1", run_id="r", seq=s.seq, phase=s.phase.value, trace_id=s.trace_id, state=s.to_json()
        )
        for s in old
    )
    Run.objects.filter(pk=run.pk).update(seq=3)
    store = DjangoCheckpointStore()
    assert store.load("t1", "r").to_json() == old[-1].to_json()
    run.refresh_from_db()
    assert [e.state.to_json() for e in run_timeline(run, after_seq=1)] == [s.to_json() for s in old[1:]]
    saved = [s.to_json() for s in old] + _saves(store, "r", range(4, 7))
    assert _history() == saved
    assert _stored() == [(1, None), (2, None), (3, None), (4, None), (5, 4), (6, 5)]


def test_a_wrong_memo_is_stored_whole_and_a_stale_save_still_stores_nothing(operator) -> None:
    """A memo of a discarded transaction gives a keyframe, one behind the latest a delta; stale raises."""
    _run()
    a, b = DjangoCheckpointStore(), DjangoCheckpointStore()
    saved = _saves(a, "r", range(1, 4))
    b.load("t1", "r")  # b's memo: seq 3
    saved += _saves(a, "r", range(4, 5))
    saved += _saves(b, "r", range(5, 6))  # based on 3 by the memo (stored); the latest row is 4
    assert _stored()[-1] == (5, 3)
    assert _history() == saved and DjangoCheckpointStore().load("t1", "r").to_json() == saved[-1]

    before = list(
        Checkpoint.objects.filter(run_id="r").order_by("seq").values_list("seq", "base_seq", "data")
    )
    with pytest.raises(StaleCheckpointError):
        a.save(grown("r", 5, note=" loser"))
    after = list(Checkpoint.objects.filter(run_id="r").order_by("seq").values_list("seq", "base_seq", "data"))
    assert [(s, base, bytes(d)) for s, base, d in after] == [(s, base, bytes(d)) for s, base, d in before]

    group = b.commit_group
    group.hold()
    b.save(grown("r", 6, note=" discarded"))  # b's memo now holds a text that is never stored
    group.discard()
    saved += _saves(b, "r", range(7, 9))
    assert _stored()[-2:] == [(7, None), (8, 7)]
    assert _history() == saved
    assert DjangoCheckpointStore().load("t1", "r").to_json() == saved[-1]


def _rows(run_id: str = "r") -> list[tuple[int, int | None, bytes]]:
    rows = Checkpoint.objects.filter(run_id=run_id).order_by("seq").values_list("seq", "base_seq", "data")
    return [(seq, base, bytes(data)) for seq, base, data in rows]


def test_a_workers_saves_forget_a_discarded_memo_and_refuse_a_stale_save(operator) -> None:
    """A fenced store (a worker's; on PostgreSQL its saves are checked by the server, so
    their commit travels with them): a discarded transaction's memo is forgotten, so the
    next save is whole; a stale save raises and stores nothing."""
    run = _run()
    store = database_stores(Fence("t1", "r", run.lease_epoch))[0]
    saved = _saves(store, "r", range(1, 3))
    group = store.commit_group
    group.hold()
    store.save(grown("r", 3, note=" discarded"))
    group.discard()
    # Seq 3 never landed: a delta of 4 against it would name a base that is not stored.
    saved += _saves(store, "r", range(4, 6))
    assert _stored() == [(1, None), (2, 1), (4, None), (5, 4)]
    before = _rows()
    with pytest.raises(StaleCheckpointError, match="r seq 5"):
        store.save(grown("r", 5, note=" loser"))
    assert _rows() == before
    saved += _saves(store, "r", range(6, 7))
    assert _stored()[-1] == (6, None)  # the refused save's memo went with it
    assert _history() == saved


def test_a_workers_delta_on_a_base_stored_otherwise_is_refused_by_the_server(operator) -> None:
    """The memo's base row holds another text (written behind this store's back): the
    server refuses the delta, nothing of its transaction lands, and the next save is whole."""
    require_postgres("the server checks a worker's saves; SQLite's store checks on the client")
    run = _run()
    store = database_stores(Fence("t1", "r", run.lease_epoch))[0]
    saved = _saves(store, "r", range(1, 3))
    other = grown("r", 2, note=" written elsewhere").to_json()
    saved[-1] = other
    data = DjangoCheckpointStore().codec.keyframe("t1", "r", 2, other)
    Checkpoint.objects.filter(run_id="r", seq=2).update(data=data, base_seq=None)
    before = _rows()
    with pytest.raises(StaleCheckpointError, match="base seq 2"):
        store.save(grown("r", 3))
    assert _rows() == before and Run.objects.get(pk=run.pk).seq == 2
    saved += _saves(store, "r", range(3, 4))
    assert _stored() == [(1, None), (2, None), (3, None)]
    assert _history() == saved


def test_pruning_stores_the_oldest_kept_checkpoint_whole(operator) -> None:
    """keep_last=3 of 20: the oldest kept was a delta of a removed row; it becomes a keyframe, all read."""
    _run(status=RunStatus.DONE)
    saved = _saves(DjangoCheckpointStore(), "r", range(1, 21))
    Run.objects.filter(run_id="r").update(updated_at=timezone.now() - timedelta(days=2))
    rows_before = _stored()
    finished_before = timezone.now() - timedelta(days=1)

    [dry] = checkpoints_prune(finished_before=finished_before, keep_last=3, dry_run=True)
    assert _stored() == rows_before and (dry.removed, dry.first_seq, dry.last_seq) == (17, 1, 17)
    assert 0 < dry.state_bytes < sum(len(t.encode()) for t in saved[:17]) / 3  # stored bytes, not JSON

    [pruned] = checkpoints_prune(finished_before=finished_before, keep_last=3)
    assert pruned == dry
    assert _stored() == [(18, None), (19, 18), (20, 19)]
    assert _history() == saved[17:]
    assert DjangoCheckpointStore().load("t1", "r").to_json() == saved[-1]
    run = Run.objects.get(run_id="r")
    assert [e.state.to_json() for e in run_timeline(run, after_seq=18)] == saved[18:]


def test_a_damaged_row_raises_checkpoint_unreadable(operator) -> None:
    """A changed byte in a stored delta: load, history and the timeline raise, never give a wrong state."""
    run = _run()
    _saves(DjangoCheckpointStore(), "r", range(1, 6))
    row = Checkpoint.objects.get(run_id="r", seq=3)
    data = bytes(row.data)
    Checkpoint.objects.filter(pk=row.pk).update(data=data[:10] + bytes([data[10] ^ 0x40]) + data[11:])
    with pytest.raises(CheckpointUnreadableError) as caught:
        DjangoCheckpointStore().load("t1", "r")
    assert "r seq 3" in caught.value.detail
    with pytest.raises(CheckpointUnreadableError):
        DjangoCheckpointStore().history("t1", "r")
    with pytest.raises(CheckpointUnreadableError):
        run_timeline(run, after_seq=3)
    assert Checkpoint.objects.chain_texts("t1", "missing") == []
