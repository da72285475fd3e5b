"""The Tasks extension's methods (``io.modelcontextprotocol/tasks``, 2026-07-28) on the low-level server.

The installed SDK (``mcp`` 2.3) defines the extension's types but serves none of its
methods, so they are registered here with ``Server.add_request_handler``, as the SDK
documents for an extension's methods: ``tasks/get``, ``tasks/cancel`` and ``tasks/update``
(the 2026 extension has no ``tasks/result`` or ``tasks/list``: a task's result is in its
``tasks/get`` answer). ``tools/call`` hands out a task (``resultType: "task"``) for a call
that waits for a person, only to a client that declared the extension on that request.
The store is the database (``mcp_gateway.tasks``); these functions turn it into the wire.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from keelgate.errors import KeelgateError
from keelgate.loop import DecisionContext
from mcp_gateway.services import CallOutcome
from mcp_gateway.tasks import TaskView, task_cancel, task_view
from sitekit.errors import NotFoundError

TASKS = "io.modelcontextprotocol/tasks"
"""The extension's identifier, in the client's per-request capabilities and the server's."""
RUN_META = "io.keelgate/run_id"
"""``_meta`` of a result or a task: the Keelgate run that is the call (look it up in the console)."""
POLL_INTERVAL_MS = 1000
"""What a client is asked to wait between two ``tasks/get``: a person decides in minutes."""

Render = Callable[[CallOutcome, str], types.CallToolResult]
Db = Callable[..., Awaitable[Any]]


class UpdateTaskRequestParams(types.RequestParams):
    """``tasks/update``: answers to a task's ``inputRequests`` (Keelgate's tasks never ask any)."""

    task_id: str
    input_responses: dict[str, Any] | None = None


def declares_tasks(ctx: Any) -> bool:
    """Whether this request's client declared the extension (2026-07-28, per request).

    Only on a 2026-era wire: a task is a result shape the earlier revisions cannot carry.
    """
    session = getattr(ctx, "session", None)
    if getattr(session, "protocol_version", None) not in MODERN_PROTOCOL_VERSIONS:
        return False
    extensions = getattr(getattr(session, "client_capabilities", None), "extensions", None) or {}
    return TASKS in extensions


def task_created(view: TaskView) -> dict[str, Any]:
    """The ``tools/call`` answer that hands out a task (a ``CreateTaskResult``)."""
    return {"resultType": "task", **_task(view)}


def _task(view: TaskView) -> dict[str, Any]:
    return {
        "taskId": view.task_id,
        "status": view.status,
        "statusMessage": view.message,
        "createdAt": view.created_at.isoformat(),
        "lastUpdatedAt": view.updated_at.isoformat(),
        "ttlMs": None,  # kept as long as its run
        "pollIntervalMs": POLL_INTERVAL_MS,
        "_meta": {RUN_META: view.run_id},
    }


def install_tasks(server: Server[Any], *, caller: Callable[[Any], Any], render: Render, db: Db) -> None:
    """Advertise the extension on ``server`` and serve its methods for the key's tenant.

    ``caller`` reads the authenticated caller off a request, ``render`` turns an outcome
    into the client's ``CallToolResult`` (the same words as an answer without a task),
    ``db`` runs ORM work off the event loop.
    """

    def detailed(view: TaskView) -> dict[str, Any]:
        wire = _task(view)
        if view.status == "completed":
            wire["result"] = render(view.outcome, view.run_id).model_dump(
                by_alias=True, mode="json", exclude_none=True
            )
        return wire

    async def found(ctx: Any, task_id: str, fn: Callable[..., TaskView], **kwargs: Any) -> TaskView:
        if not declares_tasks(ctx):
            raise MCPError(
                types.MISSING_REQUIRED_CLIENT_CAPABILITY,
                "Missing required client capability",
                data={"requiredCapabilities": {"extensions": {TASKS: {}}}},
            )
        who = caller(ctx)
        try:
            view: TaskView = await db(fn, tenant_id=who.tenant_id, task_id=task_id, **kwargs)
        except NotFoundError:
            raise MCPError(types.INVALID_PARAMS, "Failed to retrieve task: Task not found") from None
        except KeelgateError as exc:
            raise MCPError(types.INVALID_REQUEST, f"The task could not be changed ({exc.code}).") from None
        return view

    async def get(ctx: Any, params: types.GetTaskRequestParams) -> dict[str, Any]:
        return detailed(await found(ctx, params.task_id, task_view))

    async def cancel(ctx: Any, params: types.CancelTaskRequestParams) -> dict[str, Any]:
        who = caller(ctx)
        how = DecisionContext(via="api", key_id=who.key_id or None)
        await found(ctx, params.task_id, task_cancel, user=who.user, context=how)
        return {}

    async def update(ctx: Any, params: UpdateTaskRequestParams) -> dict[str, Any]:
        # No task of Keelgate's asks the client for input: every response is for a key not
        # outstanding, which the extension says to ignore; only the id must be known.
        await found(ctx, params.task_id, task_view)
        return {}

    server.extensions[TASKS] = {}
    server.add_request_handler("tasks/get", types.GetTaskRequestParams, get)
    server.add_request_handler("tasks/cancel", types.CancelTaskRequestParams, cancel)
    server.add_request_handler("tasks/update", UpdateTaskRequestParams, update)
