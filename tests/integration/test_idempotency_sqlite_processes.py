"""Claims of one SQLite file from several real processes: every key is won exactly once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

import keelgate.idempotency
from keelgate.idempotency import KeyStatus, SqliteIdempotencyStore

pytestmark = pytest.mark.slow

PROCESSES = 6
KEYS = 50
TENANT = "tenant-race"

# Each worker waits for a shared start time, then claims every key in its own order
# and prints the keys it won as JSON.
_WORKER = """
import json, random, sys, time
from datetime import UTC, datetime
from keelgate.idempotency import ClaimStatus, SqliteIdempotencyStore

path, worker, start, keys = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
store = SqliteIdempotencyStore(path)
order = [f"kg_race_{i:03d}" for i in range(keys)]
random.Random(worker).shuffle(order)
time.sleep(max(0.0, start - time.time()))
won = []
for key in order:
    status, record = store.claim(
        "tenant-race", key, owner=worker, run_id="run-" + worker, action_id=key,
        now=datetime.now(UTC), lease_seconds=30.0,
    )
    if status is ClaimStatus.CLAIMED:
        won.append(key)
    elif record.owner == worker:
        sys.exit("lost claim reports this worker as owner: " + key)
store.close()
print(json.dumps(won))
"""


def test_each_key_is_claimed_once_across_processes(tmp_path: Path) -> None:
    """6 processes race to claim the same 50 keys in one file: each key has one winner."""
    path = tmp_path / "race.sqlite3"
    repo_root = Path(keelgate.idempotency.__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo_root), *sys.path])}
    start = time.time() + 2.0
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(path), f"w{n}", str(start), str(KEYS)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for n in range(PROCESSES)
    ]
    won: dict[str, list[str]] = {}
    for n, worker in enumerate(workers):
        out, err = worker.communicate(timeout=120)
        assert worker.returncode == 0, err
        won[f"w{n}"] = json.loads(out)

    claims = Counter(key for keys in won.values() for key in keys)
    expected = {f"kg_race_{i:03d}" for i in range(KEYS)}
    assert set(claims) == expected
    assert all(count == 1 for count in claims.values()), claims.most_common(3)

    with SqliteIdempotencyStore(path) as store:
        for owner, keys in won.items():
            for key in keys:
                record = store.get(TENANT, key)
                assert record is not None
                assert record.status is KeyStatus.IN_FLIGHT
                assert record.owner == owner
