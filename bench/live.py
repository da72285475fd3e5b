"""5. Live inbox latency, against one Daphne serving the site.

Daphne runs ``keelgate_site.asgi:application`` on the scratch database with production
settings (``KEELGATE_DEBUG=0``), the in-memory channel layer, and the API rate limit off.

5. Latency from an approval committed to the database to the websocket message that
   shows it, at 1 and at 50 connected clients (``/ws/inbox/?items=1``, one session).
   Each sample is a paper-trader run driven in this process by ``runs.engine.worker.Worker``
   until its order waits for approval; the clock starts when the checkpoint save that
   creates the inbox row returns (committed), and stops at each client's first message
   naming the run. The clients run in a separate process. Baseline: PostgreSQL's own
   ``NOTIFY`` to ``LISTEN`` latency, a commit in this process reaching that process.

Benchmark 6, API throughput, is ``bench/api_load.py``.
"""

from __future__ import annotations

import asyncio
import gc
import multiprocessing as mp
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from bench import _pg
from bench._common import REPO, Row, progress, quick

BENCH_INBOX = "5. live inbox latency"
_server: dict[str, Any] = {}


def _missing() -> str | None:
    for path in ("approvals/consumers.py", "keelgate_site/api.py"):
        if not (REPO / path).exists():
            return f"{path} does not exist yet"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server() -> int:
    """Daphne's port, starting it on first use (stopped at teardown)."""
    if "port" in _server:
        return int(_server["port"])
    port = _free_port()
    log = Path(os.environ.get("BENCH_DAPHNE_LOG") or _pg.scratch_dir() / "daphne.log")
    out = log.open("wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "daphne",
            "-b",
            "127.0.0.1",
            "-p",
            str(port),
            "-v",
            "0",
            "keelgate_site.asgi:application",
        ],
        cwd=REPO,
        env={**os.environ, **_pg.django_env()},
        stdout=out,
        stderr=subprocess.STDOUT,
    )
    _server.update(port=port, proc=proc)

    def stop() -> None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        out.close()
        _server.clear()

    _pg.on_teardown(stop)
    deadline = time.monotonic() + 120
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/bench-ready", timeout=2)
        except urllib.error.HTTPError:
            break  # the JSON 404: Django answers
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"Daphne did not start: {log.read_text()[-800:]}") from None
            time.sleep(0.1)
    progress(f"Daphne up on port {port}")
    return port


def _user(tenant_slug: str, username: str) -> Any:
    from django.contrib.auth import get_user_model

    from tenants.models import Membership, Role, Tenant

    tenant, _ = Tenant.objects.get_or_create(slug=tenant_slug, defaults={"name": tenant_slug})
    user, created = get_user_model().objects.get_or_create(username=username)
    if created:
        Membership.objects.create(user=user, tenant=tenant, role=Role.ADMIN)
    return user


# -- 5. live inbox ----------------------------------------------------------------------------


def _clients_main(port: int, n: int, cookie: str, ready: Any, expect: Any, seen: Any, out: Any) -> None:
    """The client process: ``n`` websockets and one LISTEN connection, recording every message.

    For each run id the parent puts on ``expect``, it answers on ``seen`` once every
    client has received a message naming it (``None`` to finish).
    """
    import psycopg
    from websockets.asyncio.client import connect

    records: list[tuple[float, int, str]] = []

    async def client(i: int, connected: asyncio.Event) -> None:
        async with connect(
            f"ws://127.0.0.1:{port}/ws/inbox/?items=1",
            additional_headers={"Cookie": cookie},
            origin=f"http://127.0.0.1:{port}",  # type: ignore[arg-type]
            max_size=None,
        ) as ws:
            connected.set()
            async for message in ws:
                records.append((time.perf_counter(), i, str(message)))

    async def listener(connected: asyncio.Event) -> None:
        async with await psycopg.AsyncConnection.connect(_pg.BENCH_URL, autocommit=True) as conn:
            await conn.execute("LISTEN bench_floor")
            connected.set()
            async for note in conn.notifies():
                records.append((time.perf_counter(), -1, note.payload))

    async def main() -> None:
        events = [asyncio.Event() for _ in range(n + 1)]
        tasks = [asyncio.create_task(client(i, events[i])) for i in range(n)]
        tasks.append(asyncio.create_task(listener(events[n])))
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in events)), 60)
        await asyncio.sleep(0.2)
        ready.set()
        loop = asyncio.get_running_loop()
        scanned = 0  # records before this were looked at for an earlier run: read only new ones
        while True:
            run_id = await loop.run_in_executor(None, expect.get)
            if run_id is None:
                break
            deadline = time.monotonic() + 120
            got: set[int] = set()
            start = scanned
            while time.monotonic() < deadline:
                end = len(records)
                got |= {i for _, i, text in records[start:end] if i >= 0 and _shows_approval(text, run_id)}
                start = end
                if len(got) == n:
                    break
                await asyncio.sleep(0.005)
            scanned = start
            seen.put(run_id)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(main())
    out.send(records)
    out.close()


def _pyspy(label: str) -> subprocess.Popen[bytes] | None:
    """``BENCH_PYSPY=DIR``: ``py-spy record -f raw`` on Daphne (slows it: for finding where time goes)."""
    folder = os.environ.get("BENCH_PYSPY")
    if not folder or "proc" not in _server:
        return None
    os.makedirs(folder, exist_ok=True)
    spy = subprocess.Popen(
        [
            os.path.join(os.path.dirname(sys.executable), "py-spy"),
            "record",
            "--idle",
            "-f",
            "raw",
            "-r",
            "250",
            "-o",
            f"{folder}/{label}.txt",
            "--pid",
            str(_server["proc"].pid),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(1.0)
    return spy


def _shows_approval(text: str, run_id: str) -> bool:
    """The message puts the run's approval card in the inbox list.

    Not just any message naming the run: the events before its approval (requested,
    claimed) name it too, and reach the clients before the clock starts.
    """
    return run_id in text and 'id="approvals-items"' in text and 'class="item approval' in text


def _approval_sample(user: Any, t0: dict[str, float]) -> str:
    """Start a paper-trader run and drive it to its approval; return its id."""
    from runs.engine.worker import Worker
    from runs.services import run_start

    run, _ = run_start(tenant_id="live", agent="paper-trader", goal="buy 10 ACME", user=user)
    Worker(poll_seconds=0.01).run_once()
    if run.run_id not in t0:
        raise RuntimeError("the run did not reach its approval")
    return run.run_id


def _hook_saves(t0: dict[str, float]) -> Any:
    """Note when the checkpoint that creates each run's inbox row has committed."""
    from keelgate.loop import ActionStatus
    from runs.engine.stores import DjangoCheckpointStore

    original = DjangoCheckpointStore.save

    def save(self: Any, state: Any) -> None:
        original(self, state)
        if state.run_id not in t0 and any(a.status is ActionStatus.AWAITING_APPROVAL for a in state.actions):
            t0[state.run_id] = time.perf_counter()

    DjangoCheckpointStore.save = save  # type: ignore[method-assign]
    return lambda: setattr(DjangoCheckpointStore, "save", original)


def _latencies(n_clients: int, samples: int, port: int, cookie: str, user: Any) -> dict[str, Any]:
    """Per delivery, milliseconds from the commit to the client (and the NOTIFY floor's)."""
    import psycopg
    from django.db import connections

    connections.close_all()
    ctx = mp.get_context("fork")
    ready, expect, seen = ctx.Event(), ctx.Queue(), ctx.Queue()
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_clients_main, args=(port, n_clients, cookie, ready, expect, seen, send))
    proc.start()
    if not ready.wait(120):
        proc.kill()
        raise RuntimeError("the websocket clients did not connect")
    t0: dict[str, float] = {}
    floor_t0: dict[str, float] = {}
    unhook = _hook_saves(t0)
    try:
        with psycopg.connect(_pg.BENCH_URL, autocommit=True) as notifier:
            for i in range(samples):
                payload = f"floor-{i}-{uuid.uuid4().hex[:6]}"
                floor_t0[payload] = time.perf_counter()  # before: it may arrive before execute returns
                notifier.execute("SELECT pg_notify('bench_floor', %s)", (payload,))
                run_id = _approval_sample(user, t0)
                expect.put(run_id)
                seen.get(timeout=150)  # every client has it (or the child gave up)
                gc.collect()
                time.sleep(0.2)  # let the run's later events drain before the next sample
    finally:
        unhook()
        expect.put(None)
    records: list[tuple[float, int, str]] = recv.recv()
    proc.join(30)
    keel, missed = [], 0
    for run_id, start in t0.items():
        for client in range(n_clients):
            hit = next((t for t, i, text in records if i == client and _shows_approval(text, run_id)), None)
            if hit is None:
                missed += 1
            else:
                keel.append((hit - start) * 1e3)
    floor = [(t - floor_t0[text]) * 1e3 for t, i, text in records if i == -1 and text in floor_t0]
    return {"keelgate": keel, "floor": floor, "missed": missed}


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run_inbox() -> list[Row]:
    why = _missing() or _pg.reachable()
    if why:
        return [Row(BENCH_INBOX, f"not measured: {why}", "", "", None)]
    _pg.setup_django()
    from django.conf import settings
    from django.test import Client

    port = server()
    user = _user("live", "bench-live")
    client = Client()
    client.force_login(user)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    rows = []
    for n in (1, 50):
        samples = (3 if n == 1 else 2) if quick() else (20 if n == 1 else 8)
        spy = _pyspy(f"daphne-{n}")
        try:
            got = _latencies(n, samples, port, cookie, user)
        finally:
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                spy.wait(timeout=60)
        k, f = got["keelgate"], got["floor"]
        if not k:
            rows.append(Row(BENCH_INBOX, f"not measured with {n} clients: no message arrived", "", "", None))
            continue
        progress(
            f"{BENCH_INBOX}: {n} client(s): median {statistics.median(k):.1f} ms, p99 {_p(k, 0.99):.1f} ms; "
            f"NOTIFY floor median {statistics.median(f):.2f} ms"
        )
        rows.append(
            Row(
                BENCH_INBOX,
                f"approval committed -> websocket message, {n} client(s), median",
                "latency",
                "ms",
                statistics.median(k),
                k,
                extra={"clients": n, "samples": samples, "p99_ms": _p(k, 0.99), "missed": got["missed"]},
                note=f"p99 {_p(k, 0.99):.1f} ms over {len(k)} deliveries "
                f"({samples} approvals x {n} clients); {got['missed']} missed",
            )
        )
        rows.append(
            Row(
                BENCH_INBOX,
                f"floor: pg_notify commit -> LISTEN in the client process (beside {n})",
                "latency",
                "ms",
                statistics.median(f),
                f,
                extra={"p99_ms": _p(f, 0.99) if f else None},
            )
        )
    return rows
