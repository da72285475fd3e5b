"""The MCP server at ``/mcp/``: the SDK's low-level ``Server`` over Streamable HTTP, behind API keys.

Stateless Streamable HTTP (the SDK's session manager with ``stateless=True``): a site runs
several Daphne processes on one socket, and any of them must answer any request, which
is also what MCP's 2026-07-28 revision asks (no sessions). Every request carries a REST
API key (``Authorization: Bearer kg_...``); a missing, wrong or revoked one is 401 before
the SDK sees the request, and the key is never logged. The key's tenant scopes every
upstream and run; its user is the caller in the audit log.

What each call does is docs/mcp.md's: unknown tools and arguments that fail the
upstream's schema are refused here; a READ is forwarded by the request through the
engine's gateway; any other call becomes a run that a worker forwards, and the request
waits for its outcome with progress notifications, up to ``KEELGATE_MCP_WAIT_SECONDS``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import mcp_types as types
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError

from keelgate.contrib.mcp import (
    IDEMPOTENCY_KEY_META,
    REPLAYED_META,
    RUN_ID_HEADER,
    RUN_ID_META,
    IdentityError,
    SchemaViolation,
    call_identity,
    check_arguments,
    gateway_name,
    load_policy,
    offered_schema,
    split_name,
)
from keelgate.errors import KeelgateError, RunExistsError
from keelgate.gateway import SideEffect
from keelgate.loop import ActionStatus
from mcp_gateway.selectors import upstream_get, upstreams_for
from mcp_gateway.services import (
    CallOutcome,
    call_outcome,
    call_read,
    call_start,
    outcome_of,
    upstream_tools,
)
from mcp_gateway.task_methods import RUN_META, declares_tasks, install_tasks, task_created
from mcp_gateway.tasks import task_create
from tenants.access import require_role
from tenants.api_auth import verify_key
from tenants.models import Role
from tenants.ratelimit import auth_failure_check, auth_failure_hit, ratelimit_hit

log = logging.getLogger("keelgate.mcp")

_T = TypeVar("_T")
_SCOPE_KEY = "keelgate.mcp_caller"
_POLL_SECONDS = 0.2


@dataclass(frozen=True)
class McpCaller:
    """Who is calling: the key's user (the audit actor), its tenant and the key's public prefix."""

    user: Any
    tenant_id: str
    key_prefix: str
    key_id: str = ""


async def _db(fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> _T:
    """Run ORM work in a thread (never on the event loop), giving its connection back after."""

    def work() -> _T:
        try:
            return fn(*args, **kwargs)
        finally:
            close_old_connections()

    return await sync_to_async(work, thread_sensitive=False)()


def _caller(ctx: Any) -> McpCaller:
    request = getattr(ctx, "request", None)
    caller = request.scope.get(_SCOPE_KEY) if request is not None else None
    if not isinstance(caller, McpCaller):  # the endpoint authenticates every request first
        raise MCPError(types.INVALID_REQUEST, "Not authenticated.")
    return caller


def _text(text: str, *, error: bool, **meta: Any) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=error, _meta=meta or None)


ANNOTATIONS_META = "io.keelgate/annotations"
"""``_meta`` of an offered tool: what its ``annotations`` are to Keelgate (hints, not policy)."""
_HINTS = "hints from the upstream, passed on as written; Keelgate's policy decides"


async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    """Each upstream of the key's tenant, its tools as ``<upstream>__<tool>``, schemas as the upstream's.

    The upstream's annotations pass through as hints (``_meta`` says so, with the side effect
    and approval the policy gives the tool). Pages of ``KEELGATE_MCP_TOOLS_PAGE`` tools, the
    cursor an opaque position in the whole list.
    """
    caller = _caller(ctx)
    offered: list[types.Tool] = []
    for upstream in await _db(upstreams_for, tenant_id=caller.tenant_id):
        policy = load_policy(upstream.policy)
        for listed in await upstream_tools(upstream):
            tool = str(listed.get("name", ""))
            entry = policy.for_tool(tool)
            offered.append(
                types.Tool(
                    name=gateway_name(upstream.name, tool),
                    title=listed.get("title"),
                    description=listed.get("description"),
                    input_schema=offered_schema(
                        listed.get("inputSchema") or {"type": "object"}, entry.idempotency_argument
                    ),
                    annotations=listed.get("annotations"),
                    _meta={
                        ANNOTATIONS_META: _HINTS,
                        "io.keelgate/side_effect": entry.side_effect,
                        "io.keelgate/approval": entry.rule is not None,
                    },
                )
            )
    start = _cursor_position(params.cursor if params is not None else None)
    size = max(1, int(getattr(settings, "KEELGATE_MCP_TOOLS_PAGE", 200)))
    end = start + size
    more = f"tools-{end}" if end < len(offered) else None
    return types.ListToolsResult(tools=offered[start:end], next_cursor=more)


def _cursor_position(cursor: str | None) -> int:
    """Where a ``tools/list`` cursor points (``tools-<n>``, as this server wrote it)."""
    if cursor is None:
        return 0
    prefix, _, number = cursor.partition("-")
    if prefix != "tools" or not number.isdigit() or len(number) > 9:
        raise MCPError(types.INVALID_PARAMS, "Unknown cursor.")
    return int(number)


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult | dict[str, Any]:
    """One call: refused, forwarded (a READ), or played by a run and waited for (or a task)."""
    caller = _caller(ctx)
    arguments = dict(params.arguments or {})
    meta = dict(params.meta or {})
    parts = split_name(params.name)
    upstream = None if parts is None else await _db(upstream_get, tenant_id=caller.tenant_id, name=parts[0])
    listed = None
    if upstream is not None and parts is not None:
        tools = await upstream_tools(upstream)
        listed = next((t for t in tools if t.get("name") == parts[1]), None)
    if upstream is None or parts is None or listed is None:
        raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {params.name[:200]}")
    tool = parts[1]
    entry = load_policy(upstream.policy).for_tool(tool)
    reserved = entry.idempotency_argument
    try:
        check_arguments(
            offered_schema(listed.get("inputSchema") or {"type": "object"}, reserved),
            arguments,
            reserved=reserved,
        )
    except SchemaViolation as exc:
        return _text(
            f"Invalid arguments for {params.name}: {exc.field}: {exc.reason}. Nothing was forwarded.",
            error=True,
            **{"io.keelgate/code": "invalid_arguments", "io.keelgate/field": exc.field},
        )
    try:
        await _db(require_role, caller.user, caller.tenant_id, Role.APPROVER)
    except KeelgateError as exc:
        return _text(
            f"This key may not call tools ({exc.code}).", error=True, **{"io.keelgate/code": exc.code}
        )
    headers = getattr(getattr(ctx, "request", None), "headers", {}) or {}
    mcp_run = str(meta.get(RUN_ID_META) or headers.get(RUN_ID_HEADER.lower()) or f"key-{caller.key_prefix}")
    client_key = meta.get(IDEMPOTENCY_KEY_META)
    try:
        identity = call_identity(
            tenant_id=caller.tenant_id,
            mcp_run=mcp_run,
            tool=params.name,
            arguments=arguments,
            client_key=None if client_key is None else str(client_key),
        )
    except IdentityError as exc:
        return _text(f"{exc}. Nothing was forwarded.", error=True, **{"io.keelgate/code": "invalid_identity"})

    if entry.effect is SideEffect.READ and entry.rule is None:
        outcome = await call_read(
            tenant_id=caller.tenant_id,
            actor=caller.user.get_username(),
            upstream=upstream,
            tool=tool,
            arguments=arguments,
            mcp_run=mcp_run,
        )
        if outcome.status is ActionStatus.DONE:
            return _render(outcome_of(outcome, None), run_id=None, replayed=False)
        return _text(
            f"The READ failed: {outcome.code} ({outcome.message}).",
            error=True,
            **{"io.keelgate/code": outcome.code},
        )

    try:
        _, created = await _db(
            call_start,
            tenant_id=caller.tenant_id,
            user=caller.user,
            upstream=upstream,
            tool=tool,
            arguments=arguments,
            run_id=identity.run_id,
        )
    except RunExistsError:
        return _text(
            "This io.keelgate/idempotency_key was first used for a call with other arguments;"
            " nothing was forwarded.",
            error=True,
            **{"io.keelgate/code": "idempotency_key_reused"},
        )
    except KeelgateError as exc:
        return _text(
            f"The call could not be queued ({exc.code}).", error=True, **{"io.keelgate/code": exc.code}
        )
    if entry.rule is not None and declares_tasks(ctx):  # it waits for a person: a task, at once
        task = await _db(task_create, tenant_id=caller.tenant_id, run_id=identity.run_id, user=caller.user)
        return task_created(task)
    waited = await _wait(ctx, caller.tenant_id, identity.run_id)
    return _render(waited, run_id=identity.run_id, replayed=not created)


async def _wait(ctx: Any, tenant_id: str, run_id: str) -> CallOutcome:
    """The call's outcome once final, or as it stands at ``KEELGATE_MCP_WAIT_SECONDS``."""
    bound = float(getattr(settings, "KEELGATE_MCP_WAIT_SECONDS", 60))
    started = time.monotonic()
    reported = -1.0
    while True:
        outcome = await _db(call_outcome, tenant_id=tenant_id, run_id=run_id)
        waited = time.monotonic() - started
        if outcome.final or waited >= bound:
            return outcome
        if waited - reported >= 1.0:
            reported = waited
            words = (
                "waiting for a person's approval"
                if outcome.kind == "awaiting_approval"
                else "queued for a worker"
            )
            try:
                await ctx.session.report_progress(
                    round(waited, 1), bound, f"Keelgate: {words} (run {run_id})"
                )
            except Exception:  # a client that left: the run goes on; its retry reads the outcome
                log.debug("progress not delivered", exc_info=True)
        await asyncio.sleep(_POLL_SECONDS)


_AGAIN = "Calling this tool again with the same arguments returns the outcome."


def _render(outcome: CallOutcome, *, run_id: str | None, replayed: bool) -> types.CallToolResult:
    """The client's result for an outcome; ``_meta`` says the run and whether this was a replay."""
    meta: dict[str, Any] = {REPLAYED_META: replayed, "io.keelgate/status": outcome.kind}
    if run_id is not None:
        meta[RUN_META] = run_id
    if outcome.kind == "done":
        if outcome.result is None:
            return _text(
                f"A person ({outcome.by}) recorded that this call took effect; its result was not recorded.",
                error=False,
                **meta,
            )
        data = dict(outcome.result)
        data["_meta"] = {**(data.get("_meta") or {}), **meta}
        return types.CallToolResult.model_validate(data)
    if outcome.kind == "awaiting_approval":
        return _text(
            f"This call waits for a person's approval in Keelgate (run {run_id}); it has not run. "
            f"A person must decide. {_AGAIN}",
            error=False,
            **meta,
        )
    if outcome.kind == "pending":
        return _text(
            f"This call is queued in Keelgate (run {run_id}) and has not run yet. {_AGAIN}",
            error=False,
            **meta,
        )
    if outcome.kind == "denied":
        who = outcome.by or "a person"
        why = f": {outcome.note}" if outcome.note else ""
        return _text(f"Denied by {who}{why}. The call was not forwarded.", error=True, **meta)
    if outcome.kind == "unknown":
        return _text(
            "The outcome of this call is unknown: it may or may not have taken effect. It will not be "
            f"forwarded again; a person must settle it in Keelgate's inbox (run {run_id}). {_AGAIN}",
            error=True,
            **meta,
        )
    if outcome.kind == "abandoned":
        return _text(
            f"A person ({outcome.by}) recorded that this call did not take effect; it will not be forwarded "
            "again. To try afresh, call it under another io.keelgate/idempotency_key or run id.",
            error=True,
            **meta,
        )
    return _text(f"The call failed ({outcome.code}). {outcome.note}".strip(), error=True, **meta)


def build_server() -> Server[Any]:
    """The gateway's low-level server: ``tools/list``, ``tools/call`` and the Tasks extension."""
    server: Server[Any] = Server("keelgate", on_list_tools=list_tools)
    # Registered by method, not ``on_call_tool``: a call may answer with a task, not only a result.
    server.add_request_handler("tools/call", types.CallToolRequestParams, call_tool)
    install_tasks(
        server,
        caller=_caller,
        render=lambda outcome, run_id: _render(outcome, run_id=run_id, replayed=False),
        db=_db,
    )
    return server


class McpEndpoint:
    """The ASGI app at ``/mcp/``: the key checked, then the SDK's stateless session manager.

    Daphne speaks no ASGI lifespan, so the manager's ``run()`` is entered by the first
    request and held open for the life of the process.
    """

    def __init__(self) -> None:
        self._manager: StreamableHTTPSessionManager | None = None
        self._lock = asyncio.Lock()
        self._holder: asyncio.Task[None] | None = None

    async def _started(self) -> StreamableHTTPSessionManager:
        async with self._lock:
            if self._manager is None:
                manager = StreamableHTTPSessionManager(
                    app=build_server(), stateless=True, json_response=False
                )
                ready = asyncio.Event()

                async def hold() -> None:
                    async with manager.run():
                        ready.set()
                        await asyncio.Event().wait()

                self._holder = asyncio.get_running_loop().create_task(hold())
                await ready.wait()
                self._manager = manager
            return self._manager

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        caller, refusal = await _db(_authenticate, scope)
        if caller is None:
            await _refuse(send, *refusal)
            return
        manager = await self._started()
        await manager.handle_request({**scope, _SCOPE_KEY: caller}, receive, send)


def _authenticate(scope: dict[str, Any]) -> tuple[McpCaller | None, tuple[int, str]]:
    """The caller a Bearer key names, or None and the refusal (401, or 429 past the failure limit)."""
    header = b""
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            header = value
    scheme, _, token = header.decode("latin-1").partition(" ")
    address = str((scope.get("client") or ("unknown",))[0])
    try:
        auth_failure_check(address=address)
        verified = verify_key(token.strip()) if scheme.lower() == "bearer" and token.strip() else None
        if verified is None:
            auth_failure_hit(address=address)
            return None, (401, "unauthenticated")
        ratelimit_hit(key_id=verified.key.pk)
    except KeelgateError as exc:
        return None, (exc.http_status or 401, exc.code)
    return McpCaller(
        user=verified.user,
        tenant_id=verified.tenant_id,
        key_prefix=verified.key.prefix,
        key_id=str(verified.key.pk),
    ), (
        200,
        "",
    )


async def _refuse(send: Any, status: int, code: str) -> None:
    body = json.dumps(
        {"code": code, "message": "A valid API key is required (Authorization: Bearer kg_...)."}
    )
    headers = [(b"content-type", b"application/json")]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="keelgate"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body.encode()})
