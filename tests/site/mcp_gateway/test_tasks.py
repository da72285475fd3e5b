"""The Tasks extension (``io.modelcontextprotocol/tasks``) at /mcp/, end to end with the official client.

A client that declares the extension (2026-07-28, per request) gets a task at once for a
call that needs approval; the decision in the API drives it; the store is the database,
so a task outlives a restart of every process. One server per database serves the module.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, ClassVar, Literal

import mcp_types as types
import pytest
from mcp.client.extension import ClientExtension, ResultClaim
from mcp.shared.exceptions import MCPError
from pydantic import TypeAdapter

from tests.site.mcp_gateway._live import Live

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("mcp_live")]

TASKS = "io.modelcontextprotocol/tasks"
RAW = TypeAdapter(dict[str, Any])


class CreatedTask(types.Result):
    """The ``CreateTaskResult`` a ``tools/call`` may answer with (``resultType: "task"``)."""

    result_type: Literal["task"] = "task"
    task_id: str
    status: str
    status_message: str | None = None
    created_at: str
    last_updated_at: str
    ttl_ms: int | None
    poll_interval_ms: int | None = None


async def _unused(result: CreatedTask, ctx: Any) -> types.CallToolResult:
    raise AssertionError("these tests take the task as it is (allow_claimed)")


class TaskRequestParams(types.RequestParams):
    task_id: str


class GetTask(types.Request[TaskRequestParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskRequestParams
    name_param: ClassVar[str | None] = "taskId"  # the extension's Mcp-Name header


class CancelTask(types.Request[TaskRequestParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskRequestParams
    name_param: ClassVar[str | None] = "taskId"


@asynccontextmanager
async def session_of(live: Live, key: str, *, tasks: bool = True) -> AsyncIterator[Any]:
    """An official client session on the 2026-07-28 wire (``server/discover``), declaring Tasks or not."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    extensions = {
        "extensions": {TASKS: {}},
        "result_claims": {TASKS: [ResultClaim(result_type="task", model=CreatedTask, resolve=_unused)]},
    }
    async with (
        create_mcp_http_client(headers={"Authorization": f"Bearer {key}"}) as http,
        streamable_http_client(live.url, http_client=http) as (read, write),
        ClientSession(read, write, **(extensions if tasks else {})) as session,
    ):
        discovered = await session.discover()
        assert TASKS in (discovered.capabilities.extensions or {})
        yield session


async def call(session: Any, text: str) -> Any:
    return await session.call_tool("gated__send", {"to": "ann", "text": text}, allow_claimed=True)


async def get(session: Any, task_id: str) -> dict[str, Any]:
    return await session.send_request(GetTask(params=TaskRequestParams(task_id=task_id)), RAW)


async def until(session: Any, task_id: str, status: str) -> dict[str, Any]:
    for _ in range(60):
        task = await get(session, task_id)
        if task["status"] == status:
            return task
        await asyncio.sleep(0.5)
    raise AssertionError(f"the task stayed {task['status']}: {task.get('statusMessage')}")


async def awaiting(session: Any, task_id: str) -> dict[str, Any]:
    """The task once a worker has put its call in the inbox (before that it is queued)."""
    for _ in range(60):
        task = await get(session, task_id)
        assert task["status"] == "working", task
        if "approval" in task["statusMessage"]:
            return task
        await asyncio.sleep(0.5)
    raise AssertionError(f"the call never waited for an approval: {task['statusMessage']}")


def pending_approval(live: Live, run_id: str) -> dict[str, Any]:
    status, page = live.api("GET", "/approvals?status=pending", live.keys["bob"])
    assert status == 200
    (item,) = [a for a in page["items"] if a["run_id"] == run_id]
    return item


def approve(live: Live, item: dict[str, Any], note: str) -> tuple[int, Any]:
    """bob approves through the API exactly the call he was shown (its ``arguments_hash``)."""
    body = {"note": note, "arguments_hash": item["arguments_hash"]}
    return live.api("POST", f"/approvals/{item['id']}/approve", live.keys["bob"], body)


def _text(result: dict[str, Any]) -> str:
    return " ".join(c.get("text", "") for c in result["content"])


async def test_a_call_needing_approval_is_a_task_at_once_and_approved_it_completes_with_the_result(
    live: Live,
):
    """The call answers with a working task before anyone decides, nothing forwarded; approved
    through the approvals API, a worker forwards it once and ``tasks/get`` carries the result."""
    text = f"task-{uuid.uuid4().hex[:6]}"
    async with session_of(live, live.keys["alice"]) as session:
        created = await call(session, text)
        assert isinstance(created, CreatedTask) and created.status == "working"
        assert len(created.task_id) >= 40  # secrets.token_urlsafe(32)
        task = await awaiting(session, created.task_id)
        assert "result" not in task
        assert live.executions("gated", text=text) == []
        run_id = task["_meta"]["io.keelgate/run_id"]
        item = pending_approval(live, run_id)
        status, _ = approve(live, item, "ok")
        assert status == 200
        done = await until(session, created.task_id, "completed")
        again = await get(session, created.task_id)
    assert done["result"]["isError"] is False
    assert again["result"] == done["result"]
    (execution,) = live.executions("gated", text=text)  # once, with the gateway's key
    assert done["result"]["structuredContent"]["key"] == execution["arguments"]["key"]


async def test_a_denied_task_completes_with_an_error_naming_who_and_why(live: Live):
    """Denied in the API: the task is ``completed`` with an ``isError`` result naming bob and his
    note (a tool's refusal, not a protocol failure); nothing is forwarded."""
    text = f"task-deny-{uuid.uuid4().hex[:6]}"
    async with session_of(live, live.keys["alice"]) as session:
        created = await call(session, text)
        run_id = (await awaiting(session, created.task_id))["_meta"]["io.keelgate/run_id"]
        item = pending_approval(live, run_id)
        status, _ = live.api(
            "POST", f"/approvals/{item['id']}/deny", live.keys["bob"], {"note": "not to ann"}
        )
        assert status == 200
        done = await until(session, created.task_id, "completed")
    assert done["result"]["isError"] is True
    assert "bob" in _text(done["result"]) and "not to ann" in _text(done["result"])
    assert live.executions("gated", text=text) == []


async def test_tasks_cancel_withdraws_the_approval_and_nothing_is_forwarded(live: Live):
    """``tasks/cancel`` cancels the run as a person would: its approval is withdrawn (no longer
    pending, and approving it is refused), the task is ``cancelled``, the ledger stays empty."""
    text = f"task-cancel-{uuid.uuid4().hex[:6]}"
    async with session_of(live, live.keys["alice"]) as session:
        created = await call(session, text)
        run_id = (await awaiting(session, created.task_id))["_meta"]["io.keelgate/run_id"]
        item = pending_approval(live, run_id)
        ack = await session.send_request(CancelTask(params=TaskRequestParams(task_id=created.task_id)), RAW)
        assert ack.get("resultType") == "complete"
        cancelled = await until(session, created.task_id, "cancelled")
        assert "alice" in cancelled["statusMessage"]
        assert "result" not in cancelled
    status, _ = approve(live, item, "late")
    assert status == 409
    status, run = live.api("GET", f"/runs/{run_id}", live.keys["bob"])
    assert status == 200 and run["status"] == "cancelled"
    _, page = live.api("GET", "/approvals?status=pending", live.keys["bob"])
    assert run_id not in {a["run_id"] for a in page["items"]}
    await asyncio.sleep(2)  # a worker that wrongly forwarded it would have by now
    assert live.executions("gated", text=text) == []


async def test_a_task_survives_a_restart_of_every_process_and_then_completes(live: Live):
    """Created, then the whole site stopped (web, worker, sequencer) and served again: the task
    is still there, an approval then drives it to its result, forwarded once."""
    text = f"task-restart-{uuid.uuid4().hex[:6]}"
    async with session_of(live, live.keys["alice"]) as session:
        created = await call(session, text)
        before = await awaiting(session, created.task_id)
    old_port = live.port
    live.restart()
    with pytest.raises(OSError):  # the old web process is gone
        socket.create_connection(("127.0.0.1", old_port), timeout=2).close()
    async with session_of(live, live.keys["alice"]) as session:
        task = await get(session, created.task_id)
        assert task["status"] == "working" and task["statusMessage"] == before["statusMessage"]
        item = pending_approval(live, task["_meta"]["io.keelgate/run_id"])
        status, _ = approve(live, item, "ok")
        assert status == 200
        done = await until(session, created.task_id, "completed")
    assert done["result"]["isError"] is False and done["createdAt"] == task["createdAt"]
    assert len(live.executions("gated", text=text)) == 1


async def test_another_tenants_or_a_made_up_task_id_is_not_found(live: Live):
    """carol (tenant ``other``) can neither read nor cancel alice's task (-32602, as for an id
    nobody issued); alice's task still waits for its approval afterwards."""
    text = f"task-tenant-{uuid.uuid4().hex[:6]}"
    async with session_of(live, live.keys["alice"]) as session:
        created = await call(session, text)
    async with session_of(live, live.keys["carol"]) as session:
        for task_id in (created.task_id, "made-up-" + uuid.uuid4().hex):
            with pytest.raises(MCPError) as read:
                await get(session, task_id)
            assert read.value.code == types.INVALID_PARAMS and "not found" in read.value.message
            with pytest.raises(MCPError) as cancel:
                await session.send_request(CancelTask(params=TaskRequestParams(task_id=task_id)), RAW)
            assert cancel.value.code == types.INVALID_PARAMS
    async with session_of(live, live.keys["alice"]) as session:
        task = await awaiting(session, created.task_id)
    pending_approval(live, task["_meta"]["io.keelgate/run_id"])


async def test_a_client_without_tasks_waits_as_before_and_may_not_poll_tasks(live: Live):
    """Without the extension the call waits up to the bound and says a person must decide (no
    task); ``tasks/get`` from such a client is -32021 (missing client capability)."""
    text = f"task-none-{uuid.uuid4().hex[:6]}"
    async with session_of(live, live.keys["alice"], tasks=False) as session:
        waiting = await session.call_tool("gated__send", {"to": "ann", "text": text})
        assert isinstance(waiting, types.CallToolResult)
        assert (waiting.meta or {})["io.keelgate/status"] == "awaiting_approval"
        assert "person must decide" in " ".join(c.text for c in waiting.content)
        with pytest.raises(MCPError) as refused:
            await get(session, "any")
    assert refused.value.code == types.MISSING_REQUIRED_CLIENT_CAPABILITY


async def test_a_client_on_the_2025_handshake_gets_no_task_even_if_it_names_the_extension(live: Live):
    """Tasks are a 2026-07-28 extension: a client that negotiated an earlier revision (the
    ``initialize`` handshake) waits as before, whatever it advertises."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    text = f"task-legacy-{uuid.uuid4().hex[:6]}"
    async with (
        create_mcp_http_client(headers={"Authorization": f"Bearer {live.keys['alice']}"}) as http,
        streamable_http_client(live.url, http_client=http) as (read, write),
        ClientSession(read, write, extensions={TASKS: {}}) as session,
    ):
        await session.initialize()
        waiting = await session.call_tool("gated__send", {"to": "ann", "text": text})
    assert isinstance(waiting, types.CallToolResult)
    assert (waiting.meta or {})["io.keelgate/status"] == "awaiting_approval"


async def test_a_call_needing_no_approval_answers_with_its_result_even_to_a_tasks_client(live: Live):
    """The server decides per call: a WRITE the policy forwards without asking is waited for and
    answered as before (a result, never a task; a retry is the same call), forwarded once."""
    text = f"task-direct-{uuid.uuid4().hex[:6]}"
    async with session_of(live, live.keys["alice"]) as session:
        for _ in range(30):
            result = await session.call_tool("u__send", {"to": "ann", "text": text}, allow_claimed=True)
            assert isinstance(result, types.CallToolResult) and not result.is_error
            if (result.meta or {}).get("io.keelgate/status") == "done":
                break
            await asyncio.sleep(0.5)
    assert (result.meta or {}).get("io.keelgate/status") == "done"
    assert len(live.executions("u", text=text)) == 1


class PollingTasks(ClientExtension):
    """The client half a host would write: the task resolved by polling ``tasks/get``."""

    identifier = TASKS

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=self.resolve)]

    async def resolve(self, created: CreatedTask, ctx: Any) -> types.CallToolResult:
        while True:
            task = await get(ctx.session, created.task_id)
            if task["status"] == "completed":
                return types.CallToolResult.model_validate(task["result"])
            assert task["status"] == "working", task
            await asyncio.sleep(task["pollIntervalMs"] / 1000)


async def test_the_sdks_client_resolves_the_task_transparently_once_a_person_approves(live: Live):
    """``mcp.client.Client`` with an extension that polls: ``call_tool`` returns the upstream's
    result after bob approves in the API, the call forwarded once."""
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    text = f"task-client-{uuid.uuid4().hex[:6]}"

    def approve_when_pending() -> None:
        for _ in range(60):
            _, page = live.api("GET", "/approvals?status=pending", live.keys["bob"])
            mine = [a for a in page["items"] if text in json.dumps(a.get("arguments"))]
            if mine:
                status, _ = approve(live, mine[0], "")
                assert status == 200
                return
            time.sleep(0.5)
        raise AssertionError("the call never reached the inbox")

    async with (
        create_mcp_http_client(headers={"Authorization": f"Bearer {live.keys['alice']}"}) as http,
        Client(streamable_http_client(live.url, http_client=http), extensions=[PollingTasks()]) as client,
    ):
        calling = asyncio.ensure_future(client.call_tool("gated__send", {"to": "ann", "text": text}))
        await asyncio.to_thread(approve_when_pending)
        result = await calling
    assert not result.is_error
    (execution,) = live.executions("gated", text=text)
    assert result.structured_content is not None
    assert result.structured_content["key"] == execution["arguments"]["key"]
