"""A live gateway for the tests: ``keelgate_serve`` (Daphne and a worker) on a scratch database.

Tenants ``acme`` and ``other``; alice (approver) calls tools, bob (approver) decides,
vera (viewer) only lists, carol belongs to ``other``. Upstreams of ``acme``: ``u`` (its
``send`` a WRITE without approval, ``key`` its key argument; ``lookup`` a READ),
``gated`` (the same server, no policy: every tool a WRITE that needs approval). Tenant
``other`` has ``secret``. Every execution is a line in the upstream's ledger file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest

from tests.site._serve import ROOT, free_port, keelgate_serve, serve_env

UPSTREAM = ROOT / "tests" / "contrib" / "mcp" / "upstream_server.py"
PG_URL = os.environ.get("KEELGATE_MCP_TEST_PG", "postgres://postgres@127.0.0.1:5432/test")

POLICY_U = """
timeout_seconds = 8
[tools.lookup]
side_effect = "read"
[tools.garbage]
side_effect = "read"
[tools.send]
side_effect = "write"
idempotency_argument = "key"
[tools.crash]
side_effect = "write"
[tools.hang]
side_effect = "write"
"""

POLICY_WEB = """
[tools.post]
side_effect = "write"
"""

POLICY_GATED = """
[tools.send]
idempotency_argument = "key"
approval = true
"""


@dataclass
class Live:
    """The running gateway: its URL, the keys, the ledgers."""

    port: int
    keys: dict[str, str]
    ledgers: dict[str, Path]
    env: dict[str, str]
    log: IO[bytes] | None = None
    serving: ExitStack = field(default_factory=ExitStack, repr=False)
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def start(self) -> None:
        """Serve (``keelgate_serve``: Daphne, a worker, the sequencer) on a new port."""
        self.process, self.port = self.serving.enter_context(
            keelgate_serve(self.env, "--password", "pw-demo-123456", stdout=self.log, stderr=self.log)
        )

    def stop(self) -> None:
        """Stop every process of the site as Ctrl-C does (SIGTERM: it stops its children too)."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            with suppress(subprocess.TimeoutExpired):  # past it, the stack's exit kills it
                self.process.wait(timeout=60)
        self.serving.close()

    def restart(self) -> None:
        """Stop every process, then serve again from the same database."""
        self.stop()
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp/"

    def executions(self, upstream: str, **match: Any) -> list[dict[str, Any]]:
        """The ledger's lines whose arguments contain ``match``."""
        path = self.ledgers[upstream]
        if not path.exists():
            return []
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return [e for e in lines if all(e["arguments"].get(k) == v for k, v in match.items())]

    def api(self, method: str, path: str, key: str, body: Any = None) -> tuple[int, Any]:
        """One REST API request with ``key``."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/api/v1{path}",
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")

    def manage(self, *args: str) -> str:
        return _manage(self.env, *args)


def _manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


_MANY = """
import io, json, sys
from django.core.management import call_command
outputs = []
for argv in json.loads(sys.stdin.read()):
    out = io.StringIO()
    call_command(*argv, stdout=out)
    outputs.append(out.getvalue())
print(json.dumps(outputs))
"""


def _manage_many(env: dict[str, str], *commands: list[str]) -> list[str]:
    """Each command's output, all run in one ``manage.py shell`` (one Django start, not one each)."""
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", _MANY],
        cwd=ROOT,
        env=env,
        input=json.dumps(commands),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    outputs: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return outputs


def _admin(statement: str) -> None:
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True, connect_timeout=3) as conn:
        conn.execute(statement)


def this_pass() -> str:
    """The database of this pass of the suite: ``postgresql`` when ``DATABASE_URL`` names one.

    ``make test`` runs tests/site once on SQLite and once on PostgreSQL; a live server
    follows the pass, so each pass starts one, not two.
    """
    return "postgresql" if os.environ.get("DATABASE_URL", "").startswith("postgres") else "sqlite"


@contextmanager
def database(kind: str) -> Iterator[dict[str, str]]:
    """The environment for a scratch database of ``kind`` (a PostgreSQL one dropped after)."""
    if kind == "sqlite":
        yield {}
        return
    try:
        _admin("SELECT 1")
    except Exception as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"PostgreSQL is not reachable at {PG_URL}: required when CI=true")
        pytest.skip(f"PostgreSQL is not reachable at {PG_URL} ({exc.__class__.__name__})")
    name = f"keelgate_mcp_{os.getpid()}"
    _admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    _admin(f"CREATE DATABASE {name}")
    try:
        yield {"DATABASE_URL": PG_URL.rsplit("/", 1)[0] + f"/{name}"}
    finally:
        _admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@contextmanager
def live_gateway(tmp_path: Path, kind: str) -> Iterator[Live]:
    """Set up tenants, people, keys and upstreams, then serve until the block ends."""
    with database(kind) as db:
        env = serve_env(tmp_path, KEELGATE_MCP_WAIT_SECONDS="4", KEELGATE_API_KEY_CACHE_SECONDS="0", **db)
        people = {
            "alice": ("acme", "approver"),
            "bob": ("acme", "approver"),
            "vera": ("acme", "viewer"),
            "carol": ("other", "approver"),
        }
        ledgers = {name: tmp_path / f"{name}.ledger" for name in ("u", "gated", "secret", "web")}
        (tmp_path / "u.toml").write_text(POLICY_U)
        (tmp_path / "gated.toml").write_text(POLICY_GATED)
        (tmp_path / "web.toml").write_text(POLICY_WEB)
        web_port = free_port()
        web = subprocess.Popen([sys.executable, str(UPSTREAM), str(ledgers["web"]), str(web_port)])
        try:
            commands = [
                ["migrate", "--verbosity", "0"],
                ["keelgate_tenant", "acme"],
                ["keelgate_tenant", "other"],
            ]
            for user, (tenant, role) in people.items():
                commands.append(
                    [
                        "keelgate_operator",
                        user,
                        "--tenant",
                        tenant,
                        "--role",
                        role,
                        "--password",
                        "pw-123456789",
                    ]
                )
            commands.append(
                [
                    "keelgate_mcp_upstream",
                    "--tenant",
                    "acme",
                    "--name",
                    "web",
                    "--url",
                    f"http://127.0.0.1:{web_port}/mcp",
                    "--policy",
                    str(tmp_path / "web.toml"),
                ]
            )
            for tenant, name, policy in (
                ("acme", "u", "u.toml"),
                ("acme", "gated", "gated.toml"),
                ("other", "secret", None),
            ):
                command = f"{sys.executable} {UPSTREAM} {ledgers[name]}"
                extra = ["--policy", str(tmp_path / policy)] if policy else []
                commands.append(
                    [
                        "keelgate_mcp_upstream",
                        "--tenant",
                        tenant,
                        "--name",
                        name,
                        "--command",
                        command,
                        *extra,
                    ]
                )
            key_commands = [
                ["create_api_key", "--tenant", tenant, "--user", user] for user, (tenant, _) in people.items()
            ]
            outputs = _manage_many(env, *commands, *key_commands)
            keys = {
                user: output.strip().splitlines()[-1]
                for user, output in zip(people, outputs[len(commands) :], strict=True)
            }
            live = Live(port=0, keys=keys, ledgers=ledgers, env=env, log=(tmp_path / "serve.log").open("wb"))
            try:
                live.start()
                yield live
            finally:
                live.stop()
        finally:
            web.terminate()
            web.wait(timeout=10)


@asynccontextmanager
async def mcp_session(
    live: Live, key: str | None, headers: dict[str, str] | None = None
) -> AsyncIterator[Any]:
    """An initialized official client session with ``key`` (none: no Authorization header)."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    sent = dict(headers or {})
    if key is not None:
        sent["Authorization"] = f"Bearer {key}"
    async with (
        create_mcp_http_client(headers=sent) as http,
        streamable_http_client(live.url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session
