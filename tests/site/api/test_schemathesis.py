"""schemathesis fuzzes the live API: all its checks, an authenticated key, PostgreSQL in CI.

Daphne serves the site from this test's database, seeded with a tenant, a user and
key, a run waiting on an approval (``r1``) and a run with an unknown outcome (``u1``).
schemathesis reads the live OpenAPI document and sends generated requests, valid and
invalid, to every operation; the run must end with no failure (no server error, every
response conforming to the document).

The exact command and configuration are :data:`COMMAND` and :data:`CONFIG` below; by
hand, against a server of yours, with the config saved as ``schemathesis.toml``::

    schemathesis --config-file schemathesis.toml run http://127.0.0.1:8000/api/v1/openapi.json \\
        -H "Authorization: Bearer $KEY" --checks all --max-examples 30 --seed 5 --workers 1
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from runs.agents.brokerage import PaperBrokerage
from tenants.api_keys import api_key_create
from tenants.models import Tenant
from tests.site.api.conftest import Api, drain, start_pending

ROOT = Path(__file__).resolve().parents[3]

_ALSO_422 = '["2xx", "3xx", "401", "403", "404", "409", "422", "429", "5xx"]'
CONFIG = f"""
# The key's own tenant and real ids, so that generated requests reach the logic behind
# the 404s (the pytest suite covers foreign tenants and unknown ids).
[parameters]
tenant = "t1"

[[operations]]
include-path-regex = "^/api/v1/runs/[{{]run_id[}}]($|/checkpoints$|/resume$)"
parameters = {{ run_id = "r1" }}

[[operations]]
include-path-regex = "^/api/v1/approvals/[{{]approval_id[}}]"
parameters = {{ approval_id = {{approval_id}} }}

[[operations]]
include-path-regex = "/reconcile$"
parameters = {{ run_id = "u1", action_id = "{{action_id}}" }}

# 422s for rules a schema cannot state (positive_data_acceptance would call them
# schema-valid requests rejected): an opaque cursor the API did not hand out, an agent
# that is not registered or a goal it cannot read, a digest not signed by this site, a
# standing rule naming a field its tool does not have (or an agent or tool not there).
[[operations]]
include-path-regex = "^/api/v1/(runs|approvals|unknown-outcomes)$"
include-method = "GET"
checks.positive_data_acceptance.expected-statuses = {_ALSO_422}

[[operations]]
include-name = "POST /api/v1/runs"
checks.positive_data_acceptance.expected-statuses = {_ALSO_422}

[[operations]]
include-name = "POST /api/v1/audit/verify"
checks.positive_data_acceptance.expected-statuses = {_ALSO_422}

[[operations]]
include-name = "POST /api/v1/standing-approvals"
checks.positive_data_acceptance.expected-statuses = {_ALSO_422}
"""
"""The schemathesis.toml of the run (``{approval_id}`` and ``{action_id}`` filled in)."""

MAX_EXAMPLES = 30
SEED = 5
COMMAND = [
    "--config-file", "schemathesis.toml",
    "run", "{schema}",
    "-H", "Authorization: Bearer {key}",
    "--checks", "all",
    "--max-examples", str(MAX_EXAMPLES),
    "--seed", str(SEED),
    "--workers", "1",
    "--request-timeout", "30",
    "--report", "ndjson", "--report-ndjson-path", "events.ndjson",
]  # fmt: skip
"""The arguments after ``schemathesis``: about 1500 requests in about 90 seconds."""


def free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(url: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    """Poll ``url`` until it answers 200, failing if ``proc`` dies first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "daphne exited"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"{url} never answered")


def response_statuses(report: Path) -> Counter[int]:
    """The status of every response schemathesis recorded in its ndjson report."""
    statuses: Counter[int] = Counter()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("request"), dict) and isinstance(node.get("response"), dict):
                statuses[node["response"].get("status_code")] += 1
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    if report.exists():
        for line in report.read_text().splitlines():
            walk(json.loads(line))
    return statuses


def seed(operator) -> tuple[str, int, str]:
    """An API key, r1 waiting on approval and u1 with an unknown outcome: (key, approval id, action id)."""
    pending = start_pending("t1", "op")
    unknown = start_pending("t1", "op", run_id="u1")
    key = api_key_create(by="tester", tenant=Tenant.objects.get(slug="t1"), user=operator, name="fuzz")[1]
    assert (
        Api(key)
        .post(f"/approvals/{unknown.pk}/approve", {"arguments_hash": unknown.arguments_hash})
        .status_code
        == 200
    )
    PaperBrokerage().set_mode("fail")
    drain()
    PaperBrokerage().set_mode("normal")
    return key, pending.pk, unknown.action_id


@pytest.mark.slow
def test_schemathesis_finds_no_failure_in_the_live_api(child_env, operator, brokerage_path, tmp_path):
    """Every schemathesis check passes on every operation, and Daphne logs no unexpected error."""
    if connection.vendor != "postgresql":
        pytest.skip("schemathesis runs on PostgreSQL only (DATABASE_URL=postgres://...), as in CI's pass")
    cli = shutil.which("schemathesis", path=str(Path(sys.executable).parent)) or shutil.which("schemathesis")
    assert cli, "schemathesis is in the dev extra: pip install -e '.[dev]'"
    key, approval_id, action_id = seed(operator)
    (tmp_path / "schemathesis.toml").write_text(
        CONFIG.replace("{approval_id}", str(approval_id)).replace("{action_id}", action_id)
    )
    port = free_port()
    env = {**child_env, "KEELGATE_API_RATE_LIMIT": "1000000", "KEELGATE_LOG_LEVEL": "WARNING"}
    log_path = tmp_path / "daphne.log"
    with log_path.open("wb") as log:
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "daphne",
                "-b",
                "127.0.0.1",
                "-p",
                str(port),
                "keelgate_site.asgi:application",
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            schema = f"http://127.0.0.1:{port}/api/v1/openapi.json"
            wait_for(schema, server)
            args = [a.format(schema=schema, key=key) for a in COMMAND]
            done = subprocess.run(
                [cli, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
            )
        finally:
            server.terminate()
            server.wait(timeout=30)
    output = done.stdout + done.stderr
    print(output[-5000:])
    statuses = response_statuses(tmp_path / "events.ndjson")
    by_status = sorted(statuses.items())
    print(f"schemathesis: {statuses.total()} requests, exit {done.returncode}, by status {by_status}")
    assert not [status for status in statuses if status >= 500], statuses
    server_log = log_path.read_text(errors="replace")
    assert "api.unexpected_error" not in server_log, server_log[-4000:]
    assert done.returncode == 0, output[-12000:]
