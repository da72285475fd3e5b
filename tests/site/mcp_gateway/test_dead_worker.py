"""A worker that dies while it forwards a WRITE: the call is an unknown outcome, never sent again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from approvals.models import UnknownOutcome
from keelgate.contrib.mcp import call_identity
from mcp_gateway.models import Upstream
from mcp_gateway.services import call_outcome, call_start
from runs.engine.worker import Worker
from tests.site._serve import ROOT
from tests.site.console.conftest import drain
from tests.site.mcp_gateway._live import UPSTREAM

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

HANG = {"name": "hang", "description": "Never answers.", "inputSchema": {"type": "object"}}


def _executions(ledger) -> int:
    return len(ledger.read_text().splitlines()) if ledger.exists() else 0


def test_a_worker_killed_mid_write_leaves_an_unknown_outcome_never_forwarded_again(
    people, child_env, tmp_path
):
    """The worker claimed the key and the upstream received the call, then the worker died
    (SIGKILL, with its upstream): the next worker finds the key in flight, the call becomes an
    unknown outcome in the inbox, and no worker forwards it again."""
    ledger = tmp_path / "ledger"
    upstream = Upstream.objects.create(
        tenant_id="t1",
        name="u",
        command=f"{sys.executable} {UPSTREAM} {ledger}",
        tools=[HANG],
        policy={"timeout_seconds": 600, "tools": {"hang": {"side_effect": "write"}}},
    )
    identity = call_identity(tenant_id="t1", mcp_run="m", tool="u__hang", arguments={})
    call_start(
        tenant_id="t1",
        user=people["bob"],
        upstream=upstream,
        tool="hang",
        arguments={},
        run_id=identity.run_id,
    )
    with (tmp_path / "worker.log").open("ab") as log:
        worker = subprocess.Popen(
            [
                sys.executable,
                "manage.py",
                "keelgate_worker",
                "--lease-seconds",
                "2",
                "--poll-seconds",
                "0.05",
            ],
            cwd=ROOT,
            env=child_env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 90
        while _executions(ledger) == 0:
            assert worker.poll() is None and time.monotonic() < deadline, (
                tmp_path / "worker.log"
            ).read_text()
            time.sleep(0.1)
    finally:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(timeout=10)
    assert call_outcome(tenant_id="t1", run_id=identity.run_id).kind == "pending"
    time.sleep(2.5)  # the dead worker's lease runs out
    drain(Worker(lease_seconds=2))
    assert call_outcome(tenant_id="t1", run_id=identity.run_id).kind == "unknown"
    assert UnknownOutcome.objects.filter(tenant_id="t1", run_id=identity.run_id, tool="u__hang").exists()
    drain()
    assert _executions(ledger) == 1
