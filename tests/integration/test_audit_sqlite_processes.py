"""Appends to one SQLite audit file from several real processes never fork the chain."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import keelgate.audit
from keelgate.audit import SqliteAuditLog, verify

pytestmark = pytest.mark.slow

PROCESSES = 4
EACH = 100
TENANT = "tenant-race"

# Each worker opens the (possibly not yet created) file, says it is ready, waits for the
# go file so all append at once, then prints the seqs it was given as JSON.
_WORKER = """
import json, sys, time
from pathlib import Path
from keelgate.audit import SqliteAuditLog

path, worker, each, flags = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
log = SqliteAuditLog(path)
(flags / f"ready-{worker}").touch()
while not (flags / "go").exists():
    time.sleep(0.001)
seqs = [
    log.append("tenant-race", actor=worker, kind="race", body={"worker": worker, "n": n}).seq
    for n in range(each)
]
log.close()
print(json.dumps(seqs))
"""


def test_processes_appending_at_once_give_one_gapless_chain(tmp_path: Path) -> None:
    """4 processes append 100 events each to one file at once: seqs 1..400, and it verifies."""
    path = tmp_path / "audit.sqlite3"
    flags = tmp_path / "flags"
    flags.mkdir()
    repo_root = Path(keelgate.audit.__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo_root), *sys.path])}
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(path), f"w{n}", str(EACH), str(flags)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
        )
        for n in range(PROCESSES)
    ]
    try:
        deadline = time.monotonic() + 60
        while len(list(flags.glob("ready-*"))) < PROCESSES:
            assert time.monotonic() < deadline, "workers did not start"
            assert all(worker.poll() is None for worker in workers), "a worker died early"
            time.sleep(0.01)
        (flags / "go").touch()
        outputs = [worker.communicate(timeout=120) for worker in workers]
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
    for worker, (_, stderr) in zip(workers, outputs, strict=True):
        assert worker.returncode == 0, stderr

    given = [seq for stdout, _ in outputs for seq in json.loads(stdout)]
    assert sorted(given) == list(range(1, PROCESSES * EACH + 1))

    log = SqliteAuditLog(path)
    try:
        events = list(log.events(TENANT))
        assert [event.seq for event in events] == list(range(1, PROCESSES * EACH + 1))
        for n in range(PROCESSES):
            mine = [event.body["n"] for event in events if event.actor == f"w{n}"]
            assert mine == list(range(EACH)), "a worker's events are missing or out of order"
        report = verify(log, TENANT)
        assert report.ok, report
        assert (report.checked, report.head_hash) == (PROCESSES * EACH, events[-1].hash)
    finally:
        log.close()
