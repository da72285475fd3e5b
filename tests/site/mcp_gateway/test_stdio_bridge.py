"""The stdio bridge (``python -m keelgate.contrib.mcp.stdio``) launched by the official SDK's
stdio client, against a live gateway: the same tools, calls and replays as over HTTP."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from keelgate.contrib.mcp import REPLAYED_META
from tests.site._serve import ROOT
from tests.site.mcp_gateway._live import Live

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("mcp_live")]

KEY_ENV = "KG_BRIDGE_TEST_KEY"


@asynccontextmanager
async def bridged(live: Live, key: str, errlog: Path, *extra: str) -> AsyncIterator[Any]:
    """An official stdio client session whose server is the bridge, the key in its environment."""
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "keelgate.contrib.mcp.stdio", "--url", live.url, "--key-env", KEY_ENV, *extra],
        env={**os.environ, KEY_ENV: key, "PYTHONPATH": str(ROOT)},
        cwd=str(ROOT),
    )
    with errlog.open("a") as err:
        async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield session


async def test_tools_and_calls_go_through_the_bridge_and_a_retry_is_a_replay(live: Live, tmp_path):
    """Listed: the gateway's tools, the upstream's (lying) annotation passed on as a hint.
    A WRITE through the bridge runs once; the same call through a second bridge process is a
    replay; the key is in neither bridge's stderr."""
    errlog = tmp_path / "bridge.err"
    key = live.keys["alice"]
    text = f"bridge-{uuid.uuid4().hex[:6]}"
    async with bridged(live, key, errlog) as session:
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert {"u__send", "u__lookup", "gated__send"} <= set(tools)
        assert "key" not in tools["u__send"].input_schema["properties"]
        assert (
            tools["u__send"].annotations is not None and tools["u__send"].annotations.read_only_hint is True
        )
        assert (tools["u__send"].meta or {})["io.keelgate/side_effect"] == "write"
        first = await session.call_tool("u__send", {"to": "ann", "text": text})
        read = await session.call_tool("u__lookup", {"city": "Oslo"})
    assert not first.is_error and (first.meta or {})[REPLAYED_META] is False
    assert "sunny in Oslo" in read.content[0].text
    async with bridged(live, key, errlog) as session:
        again = await session.call_tool("u__send", {"to": "ann", "text": text})
    assert (again.meta or {})[REPLAYED_META] is True
    assert again.structured_content == first.structured_content
    assert len(live.executions("u", text=text)) == 1
    assert key not in errlog.read_text() and key[len("kg_") + 13 :] not in errlog.read_text()


async def test_the_run_id_option_makes_another_call(live: Live, tmp_path):
    """``--run-id`` names the MCP run: the same arguments under another run are another call."""
    errlog = tmp_path / "bridge.err"
    text = f"bridge-run-{uuid.uuid4().hex[:6]}"
    for run in ("run-a", "run-b", "run-a"):
        async with bridged(live, live.keys["alice"], errlog, "--run-id", run) as session:
            await session.call_tool("u__send", {"to": "ann", "text": text})
    assert len(live.executions("u", text=text)) == 2


async def test_a_wrong_key_lists_nothing_and_calls_nothing(live: Live, tmp_path):
    """A wrong key: listing is an error, a call forwards nothing, and the key is not echoed."""
    from mcp.shared.exceptions import MCPError

    errlog = tmp_path / "bridge.err"
    wrong = "kg_wrongwrongwr_" + "x" * 30
    text = f"bridge-bad-{uuid.uuid4().hex[:6]}"
    async with bridged(live, wrong, errlog) as session:
        with pytest.raises(MCPError):
            await session.list_tools()
        result = await session.call_tool("u__send", {"to": "ann", "text": text})
    assert result.is_error
    assert live.executions("u", text=text) == []
    assert wrong not in errlog.read_text() and "x" * 30 not in str(result.content)


def test_without_the_key_in_the_environment_the_bridge_refuses_to_start():
    """No key in the named variable: exit status 2 naming the variable, nothing on stdout."""
    env = {k: v for k, v in os.environ.items() if k != KEY_ENV}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "keelgate.contrib.mcp.stdio",
            "--url",
            "http://127.0.0.1:9/mcp/",
            "--key-env",
            KEY_ENV,
        ],
        env={**env, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2 and KEY_ENV in done.stderr and done.stdout == ""
