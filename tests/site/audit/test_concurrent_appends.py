"""Several OS processes appending to one tenant's log at once: gapless numbers, no event lost.

Half the workers ``append`` (numbering in their own transaction) and half ``record``
(on PostgreSQL an insert only, numbered by whoever sequences next: another worker's
append, or the verifier), so both paths race for the same tenant's head.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import time
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command

from audit.models import AuditEvent as EventRow
from audit.models import ChainHead, TreeNode
from audit.selectors import audit_verify
from audit.wiring import integrate_pending
from tests.site.audit import child_env
from tests.site.audit.test_tamper_sql import events_root

WORKERS = 4
APPENDS = 100
TENANT = "race"
HOW = ("append", "record")

# Every child sets up Django, waits for the start file so that all of them append at
# once, then writes its share through the real store, one transaction per event.
CHILD = """
import json, sys, time
from pathlib import Path
import django
django.setup()
from audit.wiring import audit_log
tenant, worker, count, go, how = sys.argv[1:6]
worker, count, go = int(worker), int(count), Path(go)
Path(str(go) + f".ready{worker}").touch()
deadline = time.monotonic() + 60
while not go.exists():
    if time.monotonic() > deadline:
        sys.exit("start file never appeared")
    time.sleep(0.005)
log = audit_log()
for n in range(count):
    getattr(log, how)(tenant, actor=f"worker-{worker}", kind="note", body={"worker": worker, "n": n})
    if n % 10 == 9:
        # SQLite's busy handler backs off for milliseconds, so a writer that just
        # committed wins the lock again and again; pausing now and then hands it over.
        time.sleep(0.02)
"""


def wait_ready(go: Path, procs: list[subprocess.Popen[str]]) -> None:
    """Block until every child has set up Django (or one has died)."""
    deadline = time.monotonic() + 120
    while not all(Path(f"{go}.ready{w}").exists() for w in range(len(procs))):
        dead = [p for p in procs if p.poll() is not None]
        assert not dead, dead[0].communicate()[1]
        assert time.monotonic() < deadline, "children did not start"
        time.sleep(0.02)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_concurrent_processes_append_one_gapless_log(tmp_path: Path) -> None:
    """4 processes x 100 events give seqs 1..400 with no gap, none lost, each worker's in its
    order, every leaf and subtree stored as the events give them, and the log verifies."""
    go = tmp_path / "go"
    env = child_env()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, TENANT, str(w), str(APPENDS), str(go), HOW[w % 2]],
            cwd=settings.BASE_DIR,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(WORKERS)
    ]
    try:
        wait_ready(go, procs)
        go.touch()
        for proc in procs:
            _, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, err
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    total = WORKERS * APPENDS
    report = audit_verify(tenant_id=TENANT)  # numbers what the recorders left waiting
    assert (report.ok, report.checked, report.head_seq) == (True, total, total), report
    assert integrate_pending([TENANT]) == 0  # nothing left waiting to be numbered
    rows = list(EventRow.objects.filter(tenant_id=TENANT).order_by("seq").values("seq", "actor", "body"))
    assert [r["seq"] for r in rows] == list(range(1, total + 1))
    for w in range(WORKERS):
        mine = [r["body"] for r in rows if r["actor"] == f"worker-{w}"]
        assert mine == [f'{{"n":{n},"worker":{w}}}' for n in range(APPENDS)]
    # The writers really interleaved: otherwise this test proves nothing about locking.
    switches = sum(1 for a, b in itertools.pairwise(rows) if a["actor"] != b["actor"])
    assert switches >= 2 * WORKERS
    root = events_root(TENANT)
    assert report.head_hash == root == ChainHead.objects.get(tenant_id=TENANT).root
    assert TreeNode.objects.filter(tenant_id=TENANT, level=0).count() == total  # each leaf stored once
    out = StringIO()
    call_command("verify_audit", stdout=out)
    assert out.getvalue().strip() == f"tenant={TENANT} events={total} head={total} ok"
