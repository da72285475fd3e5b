"""Where a WRITE call through the MCP gateway spends its time: ``python -m bench.mcp_phases``.

Not part of ``make bench``. A site as benchmark 12 runs it (``bench/_mcp.py``, SQLite,
``BENCH_MCP_POLL`` the worker's poll, default 0.05 s) takes ``BENCH_MCP_CALLS`` (default
12) WRITE calls from the official client, one at a time. Each call's phases are read off
the clock: the client's send and answer, the run's ``created_at`` (the request queued
it) and the run's audit events (the request's and the worker's) (their ``at``: the claim of the key, the
forwarded call's end, the run's end). Prints the median of each phase, in ms.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from datetime import datetime
from typing import Any

from bench._common import REPO, progress, scratch
from bench._mcp import Site, Upstream, client

_READ = """
import json, sys
from audit.models import AuditEvent, PendingEvent
from runs.models import Run
out = {}
for run in Run.objects.filter(tenant_id="bench"):
    events = []
    for model in (AuditEvent, PendingEvent):  # numbered already, or still in the sequencer's queue
        events += [(e.at, e.kind) for e in model.objects.filter(tenant_id="bench", run_id=run.run_id)]
    out[run.goal] = {"created": run.created_at.isoformat(), "events": [(k, at) for at, k in sorted(events)]}
print(json.dumps(out))
"""


def _ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


async def _calls(site: Site, n: int) -> list[tuple[str, float, float]]:
    done = []
    async with client(site.url, site.key) as session:
        for _ in range(n):
            text = uuid.uuid4().hex
            sent = time.time()
            result = await session.call_tool("u__send", {"to": "ann", "text": text})
            if (result.meta or {}).get("io.keelgate/status") != "done":
                raise RuntimeError(str(result.content))
            done.append((text, sent, time.time()))
    return done


def main() -> None:
    poll = float(os.environ.get("BENCH_MCP_POLL") or 0.05)
    n = int(os.environ.get("BENCH_MCP_CALLS") or 12)
    with scratch("mcp-phases") as root:
        upstream = Upstream(root)
        upstream.start()
        site = Site(root, upstream, lease_seconds=None, poll_seconds=poll, wait_seconds=60)
        try:
            site.start()
            asyncio.run(_calls(site, 2))  # warm: the tool list, the SDK's imports
            calls = asyncio.run(_calls(site, n))
            read = subprocess.run(
                [sys.executable, "manage.py", "shell", "-c", _READ],
                cwd=REPO,
                env=site.env,
                capture_output=True,
                text=True,
                check=True,
            )
        finally:
            site.stop()
            upstream.child.stop()
    runs: dict[str, Any] = json.loads(read.stdout.strip().splitlines()[-1])
    phases: dict[str, list[float]] = {}
    kinds_seen: list[str] = []
    for text, sent, answered in calls:
        (run,) = [r for goal, r in runs.items() if text in goal]
        created = _ts(run["created"])
        marks = [("sent", sent), ("run created", created)]
        for kind, at in run["events"]:
            marks.append((kind, _ts(at)))
            if kind not in kinds_seen:
                kinds_seen.append(kind)
        marks.append(("answered", answered))
        for (a, ta), (b, tb) in itertools.pairwise(marks):
            phases.setdefault(f"{a} -> {b}", []).append((tb - ta) * 1e3)
        phases.setdefault("total", []).append((answered - sent) * 1e3)
    progress(f"worker poll {poll} s, {n} calls; events of a run: {', '.join(kinds_seen)}")
    for name, values in phases.items():
        print(f"  {name:<60} median {statistics.median(values):8.1f} ms  ({len(values)} calls)")


if __name__ == "__main__":
    main()
