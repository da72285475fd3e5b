"""12. The MCP gateway's added cost: a READ against a plain SDK proxy, a WRITE against the engine's step.

One counting upstream (``tests/contrib/mcp/upstream_server.py`` over Streamable HTTP,
answering at once), reached by the official client in one session per batch
(``bench/_mcp.py``):

- **READ** (``lookup``): straight to the upstream, through the plain low-level-``Server``
  proxy (``bench/_mcp_proxy.py``) and through Keelgate's ``/mcp/`` (one Daphne, production
  settings, SQLite): per call, and the gateway's ratio to the proxy (issue 30's goal:
  at most 1.3x). Both open a new upstream session per call.
- **WRITE** (``send``, new arguments every call): through the gateway with its worker
  as deployed (``keelgate_worker``'s default poll, 0.5 s) and with a worker polling every
  0.05 s; through the proxy (no durability, for reference); and the engine's own durable
  step in this process: ``Gateway.execute`` of the same WRITE over ``SqliteStores``
  (claim the key, forward with ``keelgate.contrib.mcp.upstream_tool``, store the result,
  audit), and the same step with a local tool that does nothing (the step without MCP).

Every system runs one batch per round, rotated (``bench._common.interleave``); figures are
medians over rounds.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from bench._common import Row, interleave, median, prewarm_sqlite, progress, quick, scratch
from bench._mcp import Proxy, Site, Upstream, client

BENCH_READ = "12a. MCP READ call, added cost"
BENCH_WRITE = "12b. MCP WRITE call, added cost"


async def _calls(url: str, key: str | None, tool: str, n: int, write: bool) -> float:
    """Seconds per call over ``n`` calls in one session (opening it untimed)."""
    async with client(url, key) as session:
        started = time.perf_counter()
        for _ in range(n):
            if write:
                arguments: dict[str, Any] = {"to": "ann", "text": uuid.uuid4().hex}
                if not tool.startswith("u__"):
                    arguments["key"] = uuid.uuid4().hex
            else:
                arguments = {"city": "Oslo"}
            result = await session.call_tool(tool, arguments)
            if result.is_error or (result.meta or {}).get("io.keelgate/status", "done") != "done":
                raise RuntimeError(f"{tool}: {result.content}")
        return (time.perf_counter() - started) / n


class NoArguments(BaseModel):
    to: str
    text: str


class EngineStep:
    """The engine's durable WRITE step in this process: ``Gateway.execute`` over ``SqliteStores``."""

    def __init__(self, root: Path, upstream: Upstream) -> None:
        from keelgate.contrib.mcp import UpstreamSpec, upstream_tool
        from keelgate.gateway import Gateway, Grants, SideEffect, Tool
        from keelgate.sqlite import SqliteStores

        self.holder = prewarm_sqlite(root / "engine.sqlite3")
        self.stores = SqliteStores(root / "engine.sqlite3")
        forward = upstream_tool(
            UpstreamSpec(name="u", url=upstream.url),
            name="u__send",
            upstream_name="send",
            side_effect=SideEffect.WRITE,
            timeout=20,
            idempotency_argument="key",
        )

        def nothing(arguments: NoArguments, call: Any) -> dict[str, Any]:
            return {"sent": True}

        local = Tool("local__send", SideEffect.WRITE, NoArguments, nothing, "Does nothing.")
        self.gateway = Gateway(
            [forward, local],
            grants=Grants({"bench": ["*"]}),
            idempotency=self.stores.idempotency,
            audit=self.stores.audit,
        )

    async def calls(self, tool: str, n: int) -> float:
        from keelgate.gateway import CallContext, SideEffect
        from keelgate.idempotency import derive_key
        from keelgate.loop import ActionStatus, PlannedAction

        started = time.perf_counter()
        for _ in range(n):
            run_id = uuid.uuid4().hex
            arguments = {"to": "ann", "text": run_id}
            context = CallContext(
                tenant_id="bench",
                run_id=run_id,
                agent_id="bench",
                owner="bench",
                allowed_side_effects=frozenset(SideEffect),
            )
            action = PlannedAction(
                action_id="a1",
                iteration=1,
                tool=tool,
                arguments=arguments,
                idempotency_key=derive_key("bench", run_id, tool, arguments),
                side_effect=SideEffect.WRITE,
            )
            result = await self.gateway.execute(context, action)
            if result.outcome.status is not ActionStatus.DONE:
                raise RuntimeError(f"{tool}: {result.outcome}")
        return (time.perf_counter() - started) / n

    def close(self) -> None:
        self.stores.close()
        self.holder.close()


def run() -> list[Row]:
    rounds = 3 if quick() else 5
    reads = 20 if quick() else 50
    writes = 5 if quick() else 15
    with scratch("mcp-cost") as root:
        (root / "slow").mkdir()
        (root / "fast").mkdir()
        upstream = Upstream(root)
        upstream.start()
        proxy = Proxy(root, upstream)
        site = fast = engine = None
        try:
            proxy.start()
            progress(f"{BENCH_READ}: setting up two sites")
            site = Site(root / "slow", upstream, lease_seconds=None, poll_seconds=None, wait_seconds=60)
            fast = Site(root / "fast", upstream, lease_seconds=None, poll_seconds=0.05, wait_seconds=60)
            site.start()
            fast.start()
            engine = EngineStep(root, upstream)
            step = engine

            def read(url: str, key: str | None, tool: str) -> Any:
                return lambda: asyncio.run(_calls(url, key, tool, reads, False)) * 1e3

            def write(url: str, key: str | None, tool: str) -> Any:
                return lambda: asyncio.run(_calls(url, key, tool, writes, True)) * 1e3

            for warm in (site, fast):  # the first call lists the upstream's tools and starts the SDK
                asyncio.run(_calls(warm.url, warm.key, "u__lookup", 2, False))
                asyncio.run(_calls(warm.url, warm.key, "u__send", 1, True))
            read_values = interleave(
                BENCH_READ,
                {
                    "direct": read(upstream.url, None, "lookup"),
                    "proxy": read(proxy.url, None, "lookup"),
                    "gateway": read(site.url, site.key, "u__lookup"),
                },
                rounds=rounds,
            )
            write_values = interleave(
                BENCH_WRITE,
                {
                    "engine-local": lambda: asyncio.run(step.calls("local__send", writes * 4)) * 1e3,
                    "engine-mcp": lambda: asyncio.run(step.calls("u__send", writes)) * 1e3,
                    "proxy": write(proxy.url, None, "send"),
                    "gateway-fast": write(fast.url, fast.key, "u__send"),
                    "gateway": write(site.url, site.key, "u__send"),
                },
                rounds=rounds,
            )
        finally:
            for s in (site, fast):
                if s is not None:
                    s.stop()
            if engine is not None:
                engine.close()
            proxy.child.stop()
            upstream.child.stop()
    return _rows(read_values, write_values)


def _rows(read_values: dict[str, list[float]], write_values: dict[str, list[float]]) -> list[Row]:
    rows = []
    proxy_read = median(read_values["proxy"])
    for name, label in (
        ("direct", "READ straight to the upstream"),
        ("proxy", "READ through the plain SDK proxy"),
        ("gateway", "READ through Keelgate /mcp/ (goal <= 1.3x the proxy)"),
    ):
        value = median(read_values[name])
        rows.append(
            Row(
                BENCH_READ,
                label,
                "ms per call",
                "ms/call",
                value,
                rounds=read_values[name],
                ratio=value / proxy_read,
                ratio_to="proxy",
            )
        )
    engine = median(write_values["engine-mcp"])
    for name, label in (
        ("engine-local", "the engine's durable WRITE step, a local tool (Gateway.execute, SqliteStores)"),
        ("engine-mcp", "the engine's durable WRITE step forwarding to the upstream (upstream_tool)"),
        ("proxy", "WRITE through the plain SDK proxy (no durability)"),
        ("gateway-fast", "WRITE through Keelgate /mcp/, worker polling every 0.05 s"),
        ("gateway", "WRITE through Keelgate /mcp/, worker as deployed (poll 0.5 s)"),
    ):
        value = median(write_values[name])
        rows.append(
            Row(
                BENCH_WRITE,
                label,
                "ms per call",
                "ms/call",
                value,
                rounds=write_values[name],
                ratio=value / engine,
                ratio_to="engine step via MCP",
            )
        )
    return rows
