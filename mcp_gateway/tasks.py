"""The task store of the MCP Tasks extension (``io.modelcontextprotocol/tasks``): in the database.

A task is a handle on a call that is a run (docs/mcp.md): the ``CallTask`` row says which
run and who asked, nothing more. Its status and its result are read from the run each
time it is asked for, so a task cannot say something its run does not: the run is the one
source of truth, and both live in the database, so a task outlives every process that
served it. Ids are unguessable (``secrets.token_urlsafe``) and found only within the
caller's tenant: another tenant's id, or a made-up one, is not found.
"""

from __future__ import annotations

import secrets
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from approvals.services import run_cancel
from keelgate.errors import RunFinishedError
from keelgate.loop import DecisionContext
from mcp_gateway.models import CallTask
from mcp_gateway.services import CallOutcome, run_call_outcome
from runs.models import Run, RunStatus
from sitekit.errors import NotFoundError

__all__ = ["TaskView", "task_cancel", "task_create", "task_view"]

CANCEL_NOTE = "Withdrawn by the MCP client (tasks/cancel)."


@dataclass(frozen=True)
class TaskView:
    """A task as the protocol shows it, derived from its run."""

    task_id: str
    run_id: str
    status: Literal["working", "completed", "cancelled"]
    message: str
    outcome: CallOutcome
    """The call's outcome: rendered as the task's ``result`` once ``completed``."""
    created_at: datetime
    updated_at: datetime


def task_create(*, tenant_id: str, run_id: str, user: Any) -> TaskView:
    """Record a task for the call that is run ``run_id``; committed when this returns.

    The client may ask for it (``tasks/get``) as soon as it has the id, in any process,
    so the row is written before the response that carries the id.
    """
    task = CallTask.objects.create(
        task_id=secrets.token_urlsafe(32), tenant_id=tenant_id, run_id=run_id, created_by=user.get_username()
    )
    return _view(task)


def task_view(*, tenant_id: str, task_id: str) -> TaskView:
    """The task ``task_id`` of the tenant as its run stands now; NotFoundError for any other id."""
    return _view(_task(tenant_id, task_id))


def task_cancel(
    *, tenant_id: str, task_id: str, user: Any, context: DecisionContext | None = None
) -> TaskView:
    """Withdraw the call: its run is cancelled as a person would cancel it (its approval withdrawn).

    A call that has already finished stays as it is (the protocol's cancellation is a
    request, not a promise); a call a worker is forwarding right now finishes or becomes an
    unknown outcome, never killed mid-call (``approvals.services.run_cancel``). Every task
    of the same call (a retry got its own) sees the call withdrawn.
    """
    task = _task(tenant_id, task_id)
    with suppress(RunFinishedError):  # done already: the task is completed, and stays so
        run_cancel(tenant_id=tenant_id, run_id=task.run_id, user=user, note=CANCEL_NOTE, context=context)
    return _view(task)


def _task(tenant_id: str, task_id: str) -> CallTask:
    task = CallTask.objects.filter(tenant_id=tenant_id, task_id=task_id).first()
    if task is None:
        raise NotFoundError()
    return task


def _view(task: CallTask) -> TaskView:
    run = Run.objects.filter(tenant_id=task.tenant_id, run_id=task.run_id).first()
    if run is None:  # a run is never deleted while its task is kept; if it were, the task is gone too
        raise NotFoundError()
    outcome = run_call_outcome(run)
    status: Literal["working", "completed", "cancelled"]
    if outcome.kind == "done":  # forwarded, even if a cancel came while the worker held it
        status, message = "completed", f"Done (run {run.run_id})."
    elif outcome.kind == "unknown":
        # Not final for the client: a person records whether it happened, and that is the result.
        status = "working"
        message = (
            "The outcome is unknown: a person must settle it in Keelgate's inbox; it will not be"
            f" forwarded again (run {run.run_id})."
        )
    elif run.status == RunStatus.CANCELLED:
        status = "cancelled"
        who = run.cancel_requested_by or "a person"
        message = f"Withdrawn by {who}; the call was not forwarded (run {run.run_id})."
    elif outcome.kind == "awaiting_approval":
        status, message = "working", f"Waiting for a person's approval in Keelgate (run {run.run_id})."
    elif outcome.kind == "pending":
        status, message = "working", f"Queued in Keelgate for a worker (run {run.run_id})."
    else:  # denied, abandoned, failed: the result says which, and by whom
        status, message = "completed", f"Ended with no upstream result: {outcome.kind} (run {run.run_id})."
    return TaskView(
        task_id=task.task_id,
        run_id=task.run_id,
        status=status,
        message=message,
        outcome=outcome,
        created_at=task.created_at,
        updated_at=max(task.created_at, run.updated_at),
    )
