"""SQLite checkpoint store shared by real processes: the stale check holds across them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from keelgate.checkpoint import SqliteCheckpointStore

pytestmark = pytest.mark.slow

_REPO = Path(__file__).resolve().parents[2]
_PROCESSES = 4
_SEQS = 50
_TENANT = "tenant-race"
_RUN = "run-race"

# Each child opens the store, says it is ready, waits for the go file so that all of
# them start together, then tries every seq in turn and prints the seqs it won.
_CHILD = """
import json, random, sys, time
from datetime import UTC, datetime
from pathlib import Path

from keelgate.checkpoint import SqliteCheckpointStore
from keelgate.errors import StaleCheckpointError
from keelgate.loop import LoopState

db, workdir, index, tenant, run, seqs = sys.argv[1:7]
store = SqliteCheckpointStore(db)
Path(workdir, f"ready-{index}").touch()
go = Path(workdir, "go")
deadline = time.monotonic() + 60
while not go.exists():
    if time.monotonic() > deadline:
        sys.exit("no go signal")
    time.sleep(0.005)
won = []
for seq in range(1, int(seqs) + 1):
    state = LoopState(
        tenant_id=tenant, run_id=run, agent_id="agent-1", goal=f"process {index}",
        as_of=datetime(2025, 3, 1, tzinfo=UTC), trace_id="trace-race", seq=seq,
    )
    try:
        store.save(state)
    except StaleCheckpointError:
        pass
    else:
        won.append(seq)
    # SQLite's busy wait is not fair: without a pause the first winner keeps the
    # write lock for every seq and the others never really race it.
    time.sleep(random.random() * 0.003)
store.close()
print(json.dumps(won))
"""


def _spawn(db: Path, workdir: Path, index: int) -> subprocess.Popen[str]:
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(_REPO), os.environ.get("PYTHONPATH")])),
    )
    args = [str(db), str(workdir), str(index), _TENANT, _RUN, str(_SEQS)]
    return subprocess.Popen(
        [sys.executable, "-c", _CHILD, *args],
        cwd=_REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_each_seq_is_won_by_exactly_one_process(tmp_path: Path) -> None:
    """4 processes each save seq 1..50 of one run in one file: every seq has one winner."""
    db = tmp_path / "checkpoints.db"
    children = [_spawn(db, tmp_path, i) for i in range(_PROCESSES)]
    try:
        deadline = time.monotonic() + 60
        while not all((tmp_path / f"ready-{i}").exists() for i in range(_PROCESSES)):
            assert all(child.poll() is None for child in children), "a child died early"
            assert time.monotonic() < deadline, "children did not get ready"
            time.sleep(0.01)
        (tmp_path / "go").touch()
        won: dict[int, list[int]] = {}
        for i, child in enumerate(children):
            out, err = child.communicate(timeout=120)
            assert child.returncode == 0, err
            won[i] = json.loads(out)
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()

    every_win = sorted(seq for seqs in won.values() for seq in seqs)
    assert every_win == list(range(1, _SEQS + 1))
    winner_of = {seq: i for i, seqs in won.items() for seq in seqs}
    with SqliteCheckpointStore(db) as store:
        latest = store.load(_TENANT, _RUN)
        history = store.history(_TENANT, _RUN)
        runs = store.runs(_TENANT)
    assert latest is not None
    assert latest.seq == _SEQS
    assert [state.seq for state in history] == list(range(1, _SEQS + 1))
    assert all(state.goal == f"process {winner_of[state.seq]}" for state in history)
    assert runs == [_RUN]
