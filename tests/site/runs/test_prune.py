"""``keelgate_prune``: old checkpoints of finished runs go, the last N stay; resumable runs and audit stay."""

from __future__ import annotations

import io
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse
from django.utils import timezone

from audit.selectors import audit_verify
from keelgate.errors import NotReplayableError
from keelgate.loop import Recording
from runs.engine.stores import DjangoCheckpointStore
from runs.engine.worker import Worker
from runs.models import Checkpoint, Run, RunStatus
from runs.services import run_start
from tests.site._audit import logged
from tests.site.runs._batch import approved_runs, require_postgres
from tests.site.runs.test_kill_workers import spawn_worker, stop_all, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def _finish(op, count: int, prefix: str) -> list[str]:
    ids = approved_runs(op, count, prefix)
    worker = Worker(lease_seconds=30)
    while worker.run_once():
        pass
    assert set(Run.objects.filter(run_id__in=ids).values_list("status", flat=True)) == {RunStatus.DONE}
    return ids


def _prune(*args: str) -> str:
    out = io.StringIO()
    tomorrow = (timezone.now() + timedelta(days=1)).date().isoformat()
    call_command("keelgate_prune", "--finished-before", tomorrow, *args, stdout=out)
    return out.getvalue()


def test_prune_keeps_the_last_n_checkpoints_of_done_runs_and_every_audit_event(operator, brokerage_path):
    """Done runs keep their last 2 checkpoints and load the same state; a waiting run and the chain stay."""
    done = _finish(operator, 2, "d")
    run_start(tenant_id="t1", agent="paper-trader", goal="buy 3 ACME", user=operator, run_id="w1")
    Worker(lease_seconds=30).run_once()
    assert Run.objects.get(run_id="w1").status == RunStatus.WAITING
    store = DjangoCheckpointStore()
    before = {r: store.load("t1", r) for r in [*done, "w1"]}
    waiting_rows = Checkpoint.objects.filter(run_id="w1").count()
    events = logged().count()

    out = _prune("--keep-last", "2")

    for run_id in done:
        seqs = list(Checkpoint.objects.filter(run_id=run_id).order_by("seq").values_list("seq", flat=True))
        last = Run.objects.get(run_id=run_id).seq
        assert seqs == [last - 1, last]
        assert f"t1/{run_id}: removed checkpoints 1-{last - 2} ({last - 2}," in out
        assert store.load("t1", run_id) == before[run_id]
    assert Checkpoint.objects.filter(run_id="w1").count() == waiting_rows  # it can still resume
    assert store.load("t1", "w1") == before["w1"]
    assert "w1" not in out
    assert logged().count() == events
    assert audit_verify(tenant_id="t1").ok
    assert "from 2 run(s)" in out
    assert "removed 0 checkpoint(s)" in _prune("--keep-last", "2")  # nothing left to prune


def test_a_dry_run_prints_what_it_would_remove_and_removes_nothing(operator, brokerage_path):
    """--dry-run lists the same checkpoints and leaves every row in place."""
    [run_id] = _finish(operator, 1, "y")
    rows = Checkpoint.objects.filter(run_id=run_id).count()
    out = _prune("--dry-run")
    assert f"t1/{run_id}: would remove checkpoints 1-{rows - 1} ({rows - 1}," in out
    assert Checkpoint.objects.filter(run_id=run_id).count() == rows


def test_runs_finished_after_the_date_are_kept(operator, brokerage_path):
    """--finished-before is honoured: a run done today is not pruned with yesterday's date."""
    [run_id] = _finish(operator, 1, "k")
    rows = Checkpoint.objects.filter(run_id=run_id).count()
    out = io.StringIO()
    yesterday = (timezone.now() - timedelta(days=1)).date().isoformat()
    call_command("keelgate_prune", "--finished-before", yesterday, stdout=out)
    assert "removed 0 checkpoint(s)" in out.getvalue()
    assert Checkpoint.objects.filter(run_id=run_id).count() == rows


def test_keep_last_below_one_and_a_bad_date_are_refused(transactional_db):
    """The last checkpoint is the run's state: --keep-last 0 is an error, as is a date that is not one."""
    with pytest.raises(CommandError, match="at least 1"):
        _prune("--keep-last", "0")
    with pytest.raises(CommandError):
        call_command("keelgate_prune", "--finished-before", "soon")


def test_replay_of_a_pruned_run_says_its_history_was_pruned(operator, brokerage_path, client):
    """Recording.from_store and the replay page name the removed checkpoints, not replay half a run."""
    [run_id] = _finish(operator, 1, "r")
    _prune()
    last = Run.objects.get(run_id=run_id).seq
    with pytest.raises(NotReplayableError, match=f"was pruned: checkpoints 1 to {last - 1} were removed"):
        Recording.from_store(DjangoCheckpointStore(), "t1", run_id=run_id)
    client.force_login(operator)
    html = client.get(reverse("run-replay", args=["t1", run_id])).content.decode()
    assert "was pruned" in html


def test_pruning_while_workers_run_a_batch_loses_no_run_and_repeats_no_order(operator, child_env, tmp_path):
    """Two workers finish 12 approved runs while prune runs in a loop: every run ends done with its last
    checkpoint, each order executed once, the chain intact."""
    require_postgres("several worker processes claim with SKIP LOCKED")
    from runs.agents.brokerage import PaperBrokerage

    ids = approved_runs(operator, 12, "b")
    events_before = logged().count()
    log = Path(tmp_path) / "workers.log"
    procs = [spawn_worker(child_env, log, "--lease-seconds", "10") for _ in range(2)]
    removed = 0
    try:

        def all_done() -> bool:
            nonlocal removed
            out = _prune()
            removed += int(out.rsplit("removed ", 1)[1].split(" ", 1)[0])
            return Run.objects.filter(run_id__in=ids, status=RunStatus.DONE).count() == len(ids)

        assert wait_for(all_done, timeout=120, interval=0.05), Path(log).read_text()[-3000:]
    finally:
        stop_all(procs)
    time.sleep(0.1)
    removed += int(_prune().rsplit("removed ", 1)[1].split(" ", 1)[0])
    assert removed > 0
    store = DjangoCheckpointStore()
    for run in Run.objects.filter(run_id__in=ids):
        state = store.load("t1", run.run_id)
        assert state is not None and state.seq == run.seq
        assert Checkpoint.objects.filter(run_id=run.run_id).count() == 1
    ledger = PaperBrokerage().ledger()
    assert len(ledger) == len(ids) and all(e.executions == 1 for e in ledger)
    assert logged().count() > events_before
    assert audit_verify(tenant_id="t1").ok
