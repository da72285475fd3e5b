"""The gateway at /mcp/ end to end: the official client, a live keelgate_serve, a counting upstream.

One server (on the database of this pass of the suite: SQLite, or PostgreSQL when
``DATABASE_URL`` names it) serves every test of the session that asks for ``live``
(conftest.py); each test uses arguments of its own, so the ledgers tell its executions
apart.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import httpx2
import pytest
from mcp.shared.exceptions import MCPError

from keelgate.contrib.mcp import IDEMPOTENCY_KEY_META, REPLAYED_META, RUN_ID_META
from tests.site.mcp_gateway._live import Live, mcp_session

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("mcp_live")]


def _text(result) -> str:
    return " ".join(getattr(c, "text", "") for c in result.content)


def _meta(result) -> dict:
    return dict(result.meta or {})


async def _until_settled(live: Live, result, tool: str, arguments: dict, meta: dict | None = None):
    """The call's outcome: ``result`` unless it is still ``pending`` (the worker had not run it
    within the wait bound, as on a loaded machine), then the same call re-issued from a new
    session until it is settled, as the documented retry does."""
    for _ in range(60):
        if _meta(result).get("io.keelgate/status") != "pending":
            return result
        await asyncio.sleep(0.5)
        async with mcp_session(live, live.keys["alice"]) as session:
            result = await session.call_tool(tool, arguments, meta=meta)
    return result


async def test_tools_list_offers_each_upstream_tool_under_its_prefix_without_the_key_argument(live: Live):
    """``u__send`` with the upstream's description and schema, minus ``key``; no other tenant's tools."""
    async with mcp_session(live, live.keys["alice"]) as session:
        tools = {t.name: t for t in (await session.list_tools()).tools}
    assert {"u__lookup", "u__send", "gated__send"} <= set(tools)
    assert not any(name.startswith("secret__") for name in tools)
    send = tools["u__send"]
    assert send.description == "Send a message to someone."
    assert set(send.input_schema["properties"]) == {"to", "text"}
    assert send.input_schema["required"] == ["to", "text"]


async def test_a_read_is_forwarded_each_time(live: Live):
    """A READ reaches the upstream through the request, and again when called again."""
    city = f"city-{uuid.uuid4().hex[:6]}"
    async with mcp_session(live, live.keys["alice"]) as session:
        first = await session.call_tool("u__lookup", {"city": city})
        await session.call_tool("u__lookup", {"city": city})
    assert not first.is_error and _text(first) == f"sunny in {city}"
    assert len(live.executions("u", city=city)) == 2


async def test_a_write_runs_once_and_a_retry_under_a_new_request_returns_it_as_a_replay(live: Live):
    """The WRITE is forwarded once (by the worker, with the gateway's key); the same call from
    a new session and request id returns the first result marked as a replay, and the
    upstream still counts one execution."""
    text = f"hello-{uuid.uuid4().hex[:6]}"
    async with mcp_session(live, live.keys["alice"]) as session:
        first = await session.call_tool("u__send", {"to": "ann", "text": text})
    assert _meta(first)[REPLAYED_META] is False  # this request made the call's run
    done = await _until_settled(live, first, "u__send", {"to": "ann", "text": text})
    async with mcp_session(live, live.keys["alice"]) as session:
        again = await session.call_tool("u__send", {"text": text, "to": "ann"})
    assert not done.is_error and _meta(done)["io.keelgate/status"] == "done", _text(done)
    assert _meta(again)[REPLAYED_META] is True
    assert again.structured_content == done.structured_content
    (execution,) = live.executions("u", text=text)
    assert execution["arguments"]["key"].startswith("kg_")  # the gateway's key, in the policy's argument
    assert done.structured_content["key"] == execution["arguments"]["key"]


async def test_a_write_over_http_carries_the_key_in_the_idempotency_key_header(live: Live):
    """An upstream registered by URL gets the gateway's key as ``Idempotency-Key``, once."""
    text = f"post-{uuid.uuid4().hex[:6]}"
    async with mcp_session(live, live.keys["alice"]) as session:
        result = await session.call_tool("web__post", {"text": text})
        await session.call_tool("web__post", {"text": text})
    assert not result.is_error, _text(result)
    (execution,) = live.executions("web", text=text)
    assert str(execution["idempotency_header"]).startswith("kg_")


async def test_calls_are_runs_of_the_caller_and_reads_are_audited_as_theirs(live: Live):
    """A WRITE is a run of agent ``mcp:u`` created by alice (the runs API shows it); a READ is a
    ``gateway.call`` event by alice under the MCP run."""
    text, run = f"runs-{uuid.uuid4().hex[:6]}", f"audit-{uuid.uuid4().hex[:6]}"
    async with mcp_session(live, live.keys["alice"]) as session:
        written = await session.call_tool("u__send", {"to": "ann", "text": text})
        await session.call_tool("u__lookup", {"city": "audited"}, meta={RUN_ID_META: run})
    status, found = live.api("GET", f"/runs/{_meta(written)['io.keelgate/run_id']}", live.keys["bob"])
    assert status == 200
    assert (found["agent"], found["created_by"], found["status"]) == ("mcp:u", "alice", "done")
    status, page = live.api("GET", "/audit/events?kind=gateway.call&actor=alice&limit=200", live.keys["bob"])
    assert status == 200
    assert [e for e in page["items"] if e["run_id"] == run and e["tool"] == "u__lookup"]
    status, _ = live.api("GET", f"/runs/{_meta(written)['io.keelgate/run_id']}", live.keys["carol"])
    assert status == 404


async def test_another_run_id_or_client_key_is_another_call(live: Live):
    """The same arguments under another MCP run (``_meta``) or another client key run again."""
    text = f"twice-{uuid.uuid4().hex[:6]}"
    arguments = {"to": "ann", "text": text}
    for meta in ({RUN_ID_META: "run-a"}, {RUN_ID_META: "run-b"}, {IDEMPOTENCY_KEY_META: "k-1"}):
        async with mcp_session(live, live.keys["alice"]) as session:
            first = await session.call_tool("u__send", arguments, meta=meta)
        assert _meta(first)[REPLAYED_META] is False, meta  # a call of its own
        await _until_settled(live, first, "u__send", arguments, meta)
    async with mcp_session(live, live.keys["alice"]) as session:
        replay = await session.call_tool("u__send", arguments, meta={RUN_ID_META: "run-a"})
    assert _meta(replay)[REPLAYED_META] is True
    assert len(live.executions("u", text=text)) == 3


async def test_a_write_needing_approval_waits_then_the_retry_returns_the_approved_result(live: Live):
    """Nothing is forwarded before the approval; the call answers that a person must decide;
    approved through the approvals API, the worker forwards it once and the retry returns it."""
    text = f"gated-{uuid.uuid4().hex[:6]}"
    progress: list[float] = []

    async def on_progress(value, total, message):
        progress.append(value)

    async with mcp_session(live, live.keys["alice"]) as session:
        waiting = await session.call_tool(
            "gated__send", {"to": "ann", "text": text}, progress_callback=on_progress
        )
    assert "person must decide" in _text(waiting) and "same arguments" in _text(waiting)
    assert _meta(waiting)["io.keelgate/status"] == "awaiting_approval"
    assert progress, "the wait sends progress notifications"
    assert live.executions("gated", text=text) == []
    run_id = _meta(waiting)["io.keelgate/run_id"]
    status, page = live.api("GET", "/approvals?status=pending", live.keys["bob"])
    assert status == 200
    (item,) = [a for a in page["items"] if a["run_id"] == run_id]
    assert item["tool"] == "gated__send"
    status, _ = live.api(
        "POST",
        f"/approvals/{item['id']}/approve",
        live.keys["bob"],
        {"note": "fine", "arguments_hash": item["arguments_hash"]},
    )
    assert status == 200
    async with mcp_session(live, live.keys["alice"]) as session:
        for _ in range(20):
            result = await session.call_tool("gated__send", {"to": "ann", "text": text})
            if _meta(result).get("io.keelgate/status") == "done":
                break
            await asyncio.sleep(0.5)
    assert not result.is_error and _meta(result)[REPLAYED_META] is True
    assert len(live.executions("gated", text=text)) == 1


async def test_a_denied_write_says_who_and_why_and_is_never_forwarded(live: Live):
    """Denied in the API: the retry is an error naming bob and his note; the ledger stays empty."""
    text = f"deny-{uuid.uuid4().hex[:6]}"
    async with mcp_session(live, live.keys["alice"]) as session:
        waiting = await session.call_tool("gated__send", {"to": "ann", "text": text})
        run_id = _meta(waiting)["io.keelgate/run_id"]
        _, page = live.api("GET", "/approvals?status=pending", live.keys["bob"])
        (item,) = [a for a in page["items"] if a["run_id"] == run_id]
        status, _ = live.api(
            "POST", f"/approvals/{item['id']}/deny", live.keys["bob"], {"note": "not to ann"}
        )
        assert status == 200
        for _ in range(20):
            result = await session.call_tool("gated__send", {"to": "ann", "text": text})
            if _meta(result).get("io.keelgate/status") == "denied":
                break
            await asyncio.sleep(0.5)
    assert result.is_error and "bob" in _text(result) and "not to ann" in _text(result)
    assert live.executions("gated", text=text) == []


async def test_an_unknown_tool_is_an_error_and_nothing_runs(live: Live):
    """A name of no upstream, of no tool, or of another tenant's upstream: the same JSON-RPC error."""
    async with mcp_session(live, live.keys["alice"]) as session:
        for name in ("nope", "u__nope", "secret__send"):
            with pytest.raises(MCPError, match="Unknown tool"):
                await session.call_tool(name, {"to": "x", "text": "y"})
    assert live.executions("secret") == []


async def test_arguments_failing_the_schema_name_the_field_and_nothing_is_forwarded(live: Live):
    """Too long a text, a missing field, or the key argument itself: an error naming the field."""
    async with mcp_session(live, live.keys["alice"]) as session:
        long = await session.call_tool("u__send", {"to": "ann", "text": "x" * 101})
        missing = await session.call_tool("u__send", {"text": "no-recipient"})
        minted = await session.call_tool("u__send", {"to": "ann", "text": "minted", "key": "mine"})
    assert long.is_error and _meta(long)["io.keelgate/field"] == "text"
    assert missing.is_error and _meta(missing)["io.keelgate/field"] == "to"
    assert minted.is_error and _meta(minted)["io.keelgate/field"] == "key"
    assert live.executions("u", text="no-recipient") == [] and live.executions("u", text="minted") == []


async def test_a_read_from_a_garbled_upstream_fails_clearly(live: Live):
    """An upstream that answers with garbage (then nothing): the READ is an error, in its timeout."""
    async with mcp_session(live, live.keys["alice"]) as session:
        result = await session.call_tool("u__garbage", {}, meta={RUN_ID_META: uuid.uuid4().hex})
    assert result.is_error and "tool_timeout" in _text(result)


@pytest.mark.parametrize("tool", ["crash", "hang"])
async def test_a_write_whose_upstream_dies_or_hangs_is_an_unknown_outcome_never_sent_again(live: Live, tool):
    """No answer to a WRITE: unknown outcome, listed in the API's unknown outcomes; the retry
    says so and the upstream saw it once."""
    run = uuid.uuid4().hex
    async with mcp_session(live, live.keys["alice"]) as session:
        for _ in range(40):
            result = await session.call_tool(f"u__{tool}", {}, meta={RUN_ID_META: run})
            if _meta(result).get("io.keelgate/status") == "unknown":
                break
            await asyncio.sleep(0.5)
    assert result.is_error and "unknown" in _text(result)
    status, page = live.api("GET", "/unknown-outcomes", live.keys["bob"])
    assert status == 200
    assert [i for i in page["items"] if i["run_id"] == _meta(result)["io.keelgate/run_id"]]
    assert len([e for e in live.executions("u") if e["tool"] == tool]) >= 1
    before = len(live.executions("u"))
    async with mcp_session(live, live.keys["alice"]) as session:
        again = await session.call_tool(f"u__{tool}", {}, meta={RUN_ID_META: run})
    assert _meta(again)["io.keelgate/status"] == "unknown"
    assert len(live.executions("u")) == before


@pytest.mark.parametrize("header", [None, "Bearer kg_000000000000_" + "A" * 43, "Token whatever", "Bearer"])
async def test_a_missing_or_wrong_key_is_401(live: Live, header):
    """No key, a wrong one, another scheme: 401 before the SDK sees the request; the key is not logged."""
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    if header is not None:
        headers["Authorization"] = header
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    async with httpx2.AsyncClient() as client:
        response = await client.post(live.url, json=body, headers=headers)
    assert response.status_code == 401
    assert response.json()["code"] == "unauthenticated"
    if header and "kg_" in header:
        secret = header.split(" ")[1]
        assert secret not in (Path(live.env["KEELGATE_VAR_DIR"]) / "serve.log").read_text(errors="replace")


async def test_a_revoked_key_is_401(live: Live):
    """A key revoked after it worked stops working (the key cache is off in these servers)."""
    key = live.manage("create_api_key", "--tenant", "acme", "--user", "alice").strip().splitlines()[-1]
    async with mcp_session(live, key) as session:
        await session.list_tools()
    prefix = key.split("_")[1]
    live.manage(
        "shell",
        "-c",
        "from tenants.models import ApiKey; from tenants.api_keys import api_key_revoke; "
        f"api_key_revoke(by='tester', key=ApiKey.objects.get(prefix='{prefix}'))",
    )
    assert await _status_of_list(live, f"Bearer {key}") == 401


async def _status_of_list(live: Live, authorization: str | None) -> int:
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    if authorization is not None:
        headers["Authorization"] = authorization
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    async with httpx2.AsyncClient() as client:
        return (await client.post(live.url, json=body, headers=headers)).status_code


async def test_a_viewer_may_list_but_not_call(live: Live):
    """tools/call needs the approver role, as starting a run does; nothing is forwarded."""
    async with mcp_session(live, live.keys["vera"]) as session:
        assert (await session.list_tools()).tools
        result = await session.call_tool("u__lookup", {"city": "vera-city"})
    assert result.is_error and live.executions("u", city="vera-city") == []


async def test_another_tenants_key_sees_only_its_own_upstreams(live: Live):
    """carol (tenant other) lists ``secret__*`` and nothing of acme, and cannot call acme's tools."""
    async with mcp_session(live, live.keys["carol"]) as session:
        names = {t.name for t in (await session.list_tools()).tools}
        with pytest.raises(MCPError, match="Unknown tool"):
            await session.call_tool("u__lookup", {"city": "carol-city"})
    assert names and all(n.startswith("secret__") for n in names)
    assert live.executions("u", city="carol-city") == []


async def test_a_very_large_payload_is_refused_and_nothing_is_forwarded(live: Live):
    """A 5 MiB call (past the SDK's 4 MiB request bound): 413 with a good key, nothing forwarded."""
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "Authorization": f"Bearer {live.keys['alice']}",
    }
    marker = f"big-{uuid.uuid4().hex[:6]}"
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "u__send", "arguments": {"to": marker, "text": "x" * (5 * 1024 * 1024)}},
    }
    async with httpx2.AsyncClient(timeout=60) as client:
        response = await client.post(live.url, json=body, headers=headers)
    assert response.status_code == 413
    assert live.executions("u", to=marker) == []
