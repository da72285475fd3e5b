"""The console's people (t1: op, viewer, bob, rita; t2: eve) for the in-process MCP gateway tests,
and ``live``: one live gateway for the whole session (``_live.live_gateway``), on the
database of this pass of the suite (``_live.this_pass``).

Its setup (a database, a ``keelgate_serve``) takes a while, so every module that asks for
``live`` shares it, and marks itself ``pytest.mark.xdist_group("mcp_live")`` so that
``make test`` (``--dist loadgroup``) runs them all on one xdist worker, which starts it
once. A test keeps to arguments of its own and never kills its processes (the SIGKILL
tests start their own, ``bench/_mcp.py``); the Tasks test's restart serves again from the
same database, on a new port that ``live.url`` follows.
"""

import pytest

from tests.site.console.conftest import people  # noqa: F401  (a fixture, used by name)
from tests.site.mcp_gateway._live import live_gateway, this_pass


@pytest.fixture(scope="session", params=[this_pass()])
def live(request, tmp_path_factory):
    with live_gateway(tmp_path_factory.mktemp(f"mcp-{request.param}"), request.param) as gateway:
        yield gateway
