"""SIGKILLs of the gateway's processes during WRITE calls: no duplicate execution downstream.

Benchmark 11's harness (``bench/mcp_sigkill.py``) at a small fixed size, on the database
of this pass of the suite (SQLite, or PostgreSQL when ``DATABASE_URL`` names it): the
official client calls a counting upstream's ``send`` straight, through a plain SDK proxy
and through Keelgate's ``/mcp/`` (its own Daphne and worker), re-issuing a broken call as
a new request with a new id, as MCP's 2026-07-28 revision says.

First the deterministic window: each kill lands right after the upstream wrote its ledger
line and before it answered. Straight and through the proxy every such kill breaks the
call and its re-issue executes it again, so the baselines must show one duplicate per
kill (the harness breaks calls that took effect: this test could fail); through the
gateway, a killed Daphne breaks the client's stream and the re-issue gets the first
execution's result, and a killed worker leaves an unknown outcome, settled through the
REST API and never forwarded again. Then seeded random kills of Daphne or the worker.
"""

from __future__ import annotations

import pytest

from bench.mcp_sigkill import measure, running
from tests.site.mcp_gateway._live import database, this_pass

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=[this_pass()])
def systems(request, tmp_path_factory):
    with (
        database(request.param) as db,
        running(
            tmp_path_factory.mktemp(f"sigkill-{request.param}"), database_url=db.get("DATABASE_URL", "")
        ) as s,
    ):
        yield s


def test_kills_after_the_effect_duplicate_the_baselines_and_never_the_gateway(systems):
    stats = measure(systems, 2, kill="after_effect")
    for baseline in ("direct", "proxy"):
        st = stats[baseline]
        assert st["kills"] == 2 and st["broken"] == 2, st
        assert st["duplicates"] == 2, st  # every re-issue executed the call again
    gateway = stats["gateway"]
    assert gateway["kills_by_target"] == {"web": 1, "worker": 1}, gateway
    assert gateway["duplicates"] == 0 and gateway["lost"] == 0, gateway
    assert gateway["broken"] >= 1, gateway  # the killed Daphne broke the client's stream
    assert gateway["unknown"] == 1 and gateway["abandoned"] == 0, gateway  # the killed worker's call


def test_random_kills_of_daphne_or_the_worker_never_duplicate_a_write(systems):
    stats = measure(systems, 4, kill="random", seed=30, only=("gateway",))
    gateway = stats["gateway"]
    assert gateway["kills"] == 4, gateway
    assert gateway["duplicates"] == 0 and gateway["lost"] == 0, gateway
