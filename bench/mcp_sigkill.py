"""11. MCP WRITE calls under SIGKILL: straight to the upstream, a plain SDK proxy, Keelgate's gateway.

The official client calls the counting upstream's ``send`` (a WRITE that takes
``UPSTREAM_SEND_SECONDS``, half before its ledger line and half after, as a real API's
round trip) three ways (``bench/_mcp.py``): ``direct``, through ``proxy`` (the plain
low-level-``Server`` proxy) and through ``gateway`` (Keelgate's ``/mcp/``: Daphne and a
worker). Each trial is one call with arguments of its own; while it is in flight the
harness SIGKILLs one of the processes serving it (direct: the upstream; proxy: the proxy;
gateway: Daphne or the worker, drawn from the seeded generator) and starts it again, as a
supervisor would. A kill drawn for a call already answered is not made: the trial counts
as missed and another one runs.

The client does what MCP's 2026-07-28 revision says (SEP-2575): a call whose response
stream broke is **re-issued as a new request with a new id** (a new session), until it has
an answer. Through the gateway it also calls again while the answer says the call is
queued, and an answer that the outcome is unknown is **settled through the REST API**
(``POST /api/v1/runs/{run}/actions/{action}/reconcile``), as a person would: by looking
the gateway's key up downstream (the upstream's ledger holds the ``key`` argument it was
sent), then calling again for the outcome.

Per system: kills, calls whose stream the kill broke, **duplicate executions** (a trial's
ledger lines beyond the first), unknown outcomes (settled: executed or not), and lost calls
(none executed and not settled as such). ``kill="after_effect"`` (the test's deterministic
window) kills as soon as the trial's ledger line is written, while the upstream has not
answered yet: every such kill breaks a call that took effect.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench._common import Row, progress, quick, scratch
from bench._mcp import Child, Proxy, Site, Upstream, call_once

BENCH = "11. MCP WRITE calls, SIGKILL"
SEED = 11
SYSTEMS = ("direct", "proxy", "gateway")
SEND_SECONDS = 0.4
STATUS = "io.keelgate/status"
RUN = "io.keelgate/run_id"


class Systems:
    """The upstream, the proxy in front of it and the gateway, all running."""

    def __init__(self, upstream: Upstream, proxy: Proxy, site: Site) -> None:
        self.upstream, self.proxy, self.site = upstream, proxy, site

    def url(self, system: str) -> tuple[str, str | None, str]:
        """The client's URL, key and tool name for ``system``."""
        if system == "direct":
            return self.upstream.url, None, "send"
        if system == "proxy":
            return self.proxy.url, None, "send"
        return self.site.url, self.site.key, "u__send"

    def targets(self, system: str) -> list[Child]:
        if system == "direct":
            return [self.upstream.child]
        if system == "proxy":
            return [self.proxy.child]
        return [self.site.web, self.site.worker]


@contextmanager
def running(root: Path, *, database_url: str = "", send_seconds: float = SEND_SECONDS) -> Iterator[Systems]:
    """Start the three systems under ``root``; stop them after."""
    upstream = Upstream(root, send_seconds=send_seconds)
    upstream.start()
    proxy = Proxy(root, upstream)
    site: Site | None = None
    try:
        proxy.start()
        site = Site(root, upstream, database_url=database_url)
        site.start()
        yield Systems(upstream, proxy, site)
    finally:
        if site is not None:
            site.stop()
        proxy.child.stop()
        upstream.child.stop()


def _arguments(system: str, text: str) -> dict[str, Any]:
    # Straight or through the proxy the client fills the upstream's key argument itself (the
    # gateway hides it and fills it); this upstream, as many, does not deduplicate by it.
    arguments: dict[str, Any] = {"to": "ann", "text": text}
    if system != "gateway":
        arguments["key"] = f"k-{random.getrandbits(64):x}"
    return arguments


def _settle(systems: Systems, run_id: str) -> bool:
    """Settle the run's open unknown outcome from the downstream, through the REST API; True: executed."""
    site = systems.site
    status, page = site.api("GET", "/unknown-outcomes?limit=200")
    assert status == 200, page
    (item,) = [i for i in page["items"] if i["run_id"] == run_id]
    ledger = systems.upstream.ledger.read_text() if systems.upstream.ledger.exists() else ""
    executed = f'"key": "{item["idempotency_key"]}"' in ledger
    path = f"/runs/{run_id}/actions/{item['action_id']}/reconcile"
    status, body = site.api(
        "POST", path, {"executed": executed, "note": "looked the key up in the upstream's ledger"}
    )
    assert status == 200, body
    return executed


async def issue_until_answered(systems: Systems, system: str, text: str) -> dict[str, Any]:
    """The client: re-issue (new request, new id) until answered; through the gateway, until final."""
    url, key, tool = systems.url(system)
    arguments = _arguments(system, text)
    out: dict[str, Any] = {"broken": 0, "requests": 0, "unknown": 0, "abandoned": 0, "status": ""}
    end = time.monotonic() + 300
    while time.monotonic() < end:
        out["requests"] += 1
        try:
            result = await call_once(url, key, tool, arguments, timeout=60)
        except Exception:  # the stream broke (or never opened): the 2026 rule, a new request
            out["broken"] += 1
            await asyncio.sleep(0.1)
            continue
        meta = dict(result.meta or {})
        if system != "gateway":
            out["status"] = "error" if result.is_error else "done"
            return out
        status = meta.get(STATUS, "")
        if status in ("done", "abandoned"):
            out["status"] = status
            return out
        if status == "unknown":
            out["unknown"] += 1
            executed = await asyncio.to_thread(_settle, systems, meta[RUN])
            out["abandoned"] += int(not executed)
            continue
        if status in ("pending", "awaiting_approval"):
            continue  # "calling again with the same arguments returns the outcome"
        raise RuntimeError(f"gateway answered {status}: {result.content}")
    raise RuntimeError(f"{system}: no answer for {text} in 300 s")


async def clean_duration(systems: Systems, system: str, text: str) -> float:
    started = time.monotonic()
    await issue_until_answered(systems, system, text)
    return time.monotonic() - started


async def killed_trial(
    systems: Systems, system: str, text: str, *, kill: str, delay: float, target: Child
) -> dict[str, Any] | None:
    """One call with ``target`` SIGKILLed during it (and started again); None if it answered first."""
    call = asyncio.create_task(issue_until_answered(systems, system, text))
    if kill == "after_effect":
        while systems.upstream.executions(text) == 0 and not call.done():
            await asyncio.sleep(0.005)
    else:
        await asyncio.wait({call}, timeout=delay)
    if call.done():
        await call
        return None
    target.kill()
    target.start()
    outcome = await call
    outcome["target"] = target.name
    outcome["executions"] = systems.upstream.executions(text)
    return outcome


def _empty() -> dict[str, Any]:
    return {
        "kills": 0,
        "missed": 0,
        "broken": 0,
        "duplicates": 0,
        "unknown": 0,
        "abandoned": 0,
        "lost": 0,
        "kills_by_target": {},
    }


async def measure_async(
    systems: Systems, kills: int, *, seed: int = SEED, kill: str = "random", only: tuple[str, ...] = SYSTEMS
) -> dict[str, dict[str, Any]]:
    """``kills`` SIGKILLed calls per system; per system the counts above and the clean call's ms."""
    rng = random.Random(seed)
    durations = {s: 0.0 for s in only}  # after_effect kills need no clean duration
    for system in only if kill == "random" else ():
        runs = [await clean_duration(systems, system, f"clean-{system}-{seed}-{i}") for i in range(3)]
        durations[system] = statistics.median(runs)
    stats = {s: _empty() for s in only}
    attempt = 0
    while min(st["kills"] for st in stats.values()) < kills and attempt < kills * 5:
        attempt += 1
        order = list(only) if attempt % 2 else list(reversed(only))
        for system in order:
            st = stats[system]
            if st["kills"] >= kills:
                continue
            targets = systems.targets(system)
            target = targets[st["kills"] % len(targets)] if kill == "after_effect" else rng.choice(targets)
            delay = rng.uniform(0, durations[system])
            text = f"{system}-{kill}-{seed}-{attempt}"
            outcome = await killed_trial(systems, system, text, kill=kill, delay=delay, target=target)
            if outcome is None:
                st["missed"] += 1
                continue
            st["kills"] += 1
            by_target = st["kills_by_target"]
            by_target[target.name] = by_target.get(target.name, 0) + 1
            st["broken"] += int(outcome["broken"] > 0)
            st["duplicates"] += max(0, outcome["executions"] - 1)
            st["unknown"] += outcome["unknown"]
            st["abandoned"] += outcome["abandoned"]
            st["lost"] += int(outcome["executions"] == 0 and outcome["status"] != "abandoned")
            progress(f"{BENCH}: {system} kill {st['kills']}/{kills} ({target.name}): {outcome}")
    for system, st in stats.items():
        st["call_ms"] = durations[system] * 1e3
    return stats


def measure(systems: Systems, kills: int, **options: Any) -> dict[str, dict[str, Any]]:
    return asyncio.run(measure_async(systems, kills, **options))


LABELS = {
    "direct": "straight to the upstream, the client re-issuing",
    "proxy": "a plain SDK proxy (low-level Server), the client re-issuing",
    "gateway": "Keelgate /mcp/ (Daphne + worker), unknown outcomes settled through the API",
}


def run() -> list[Row]:
    kills = 10 if quick() else 40
    with scratch("mcp-sigkill") as root, running(root) as systems:
        stats = measure(systems, kills)
    rows = []
    for system in SYSTEMS:
        st = stats[system]
        note = (
            f"kills by process {st['kills_by_target']}; {st['broken']} calls broken; {st['lost']} lost; "
            f"{st['missed']} kills too late, retried"
        )
        if system == "gateway":
            note += (
                f"; unknown outcomes {st['unknown']} (settled: {st['abandoned']} not executed, "
                f"{st['unknown'] - st['abandoned']} executed)"
            )
        rows.append(
            Row(
                BENCH,
                LABELS[system],
                "duplicates",
                f"dup/{st['kills']} kills",
                float(st["duplicates"]),
                extra={**st, "unknown_outcomes": st["unknown"], "seed": SEED, "send_seconds": SEND_SECONDS},
                note=note,
            )
        )
    return rows
