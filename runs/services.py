"""Writes about runs: start, resume. Views, the API and commands call these, nothing else."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from audit.store import DjangoAuditLog
from keelgate.errors import RunError, RunExistsError
from keelgate.loop import LoopLimits
from keelgate_site.db import unique_or_none
from runs.agents import load_agent
from runs.models import Run, RunStatus
from runs.temporal import dispatch_on_commit
from tenants.access import NotFoundError, require_role
from tenants.models import Role


class NotResumableError(RunError):
    """Only a stopped run (a budget stop or an error) can be resumed by hand."""

    code = "not_resumable"
    message = "Only a stopped run can be resumed."


def run_start(
    *,
    tenant_id: str,
    agent: str,
    goal: str,
    user: Any,
    run_id: str | None = None,
    limits: dict[str, Any] | None = None,
    as_of: datetime | None = None,
) -> tuple[Run, bool]:
    """Queue a new run for a worker; return it and whether it was created.

    A repeated request with the same ``run_id``, agent and goal returns the existing
    run and starts nothing; the same id with a different request is RunExistsError.
    """
    require_role(user, tenant_id, Role.APPROVER)
    spec = load_agent(agent)
    spec.validate_goal(goal)
    checked = LoopLimits.model_validate(limits or {}).model_dump(exclude_none=True)
    run_id = run_id or uuid.uuid4().hex
    with transaction.atomic():
        existing = unique_or_none(Run.objects.filter(tenant_id=tenant_id, run_id=run_id))
        if existing is not None:
            if existing.agent == agent and existing.goal == goal:
                return existing, False
            raise RunExistsError(run_id)
        run = Run.objects.create(
            tenant_id=tenant_id,
            run_id=run_id,
            agent=agent,
            goal=goal,
            as_of=as_of or timezone.now(),
            limits=checked,
            pending_limits=checked or None,
            status=RunStatus.QUEUED,
            created_by=user.get_username(),
        )
        DjangoAuditLog().append(
            tenant_id,
            actor=user.get_username(),
            kind="run.requested",
            body={"run_id": run_id, "agent": agent},
        )
        dispatch_on_commit(run)
    return run, True


def run_resume(*, tenant_id: str, run_id: str, user: Any, limits: dict[str, Any] | None = None) -> Run:
    """Queue a stopped run again, optionally with new (larger) limits."""
    require_role(user, tenant_id, Role.APPROVER)
    checked = LoopLimits.model_validate(limits or {}).model_dump(exclude_none=True)
    with transaction.atomic():
        run = unique_or_none(Run.objects.select_for_update().filter(tenant_id=tenant_id, run_id=run_id))
        if run is None:
            raise NotFoundError()
        if run.status != RunStatus.STOPPED:
            raise NotResumableError(run.status)
        run.status = RunStatus.QUEUED
        run.pending_limits = checked or None
        run.save(update_fields=["status", "pending_limits", "updated_at"])
        DjangoAuditLog().append(
            tenant_id,
            actor=user.get_username(),
            kind="run.resumed",
            body={"run_id": run_id, "limits": checked},
        )
        dispatch_on_commit(run)
    return run


def run_requeue(*, tenant_id: str, run_id: str) -> None:
    """Make a waiting run runnable again after a person decided (approve, deny, reconcile)."""
    updated = Run.objects.filter(tenant_id=tenant_id, run_id=run_id, status=RunStatus.WAITING).update(
        status=RunStatus.QUEUED, updated_at=timezone.now()
    )
    if updated:
        dispatch_on_commit(Run.objects.get(tenant_id=tenant_id, run_id=run_id))
