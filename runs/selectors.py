"""Reads about runs, always scoped to tenants the caller may see."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet

from keelgate.loop import LoopState
from runs.models import Checkpoint, Run
from sitekit.errors import NotFoundError


def runs_for(
    *,
    tenant_ids: Iterable[str],
    status: str | None = None,
    agent: str | None = None,
    stop_reason: str | None = None,
) -> QuerySet[Run]:
    """Runs of the given tenants, newest first, filtered."""
    runs = Run.objects.filter(tenant_id__in=list(tenant_ids)).order_by("-created_at", "-id")
    if status:
        runs = runs.filter(status=status)
    if agent:
        runs = runs.filter(agent=agent)
    if stop_reason:
        runs = runs.filter(stop_reason=stop_reason)
    return runs


def run_get(*, tenant_ids: Iterable[str], run_id: str, tenant_id: str | None = None) -> Run:
    """One run the caller may see, or NotFoundError (also for another tenant's run)."""
    runs = Run.objects.filter(tenant_id__in=list(tenant_ids), run_id=run_id)
    if tenant_id is not None:
        runs = runs.filter(tenant_id=tenant_id)
    run = runs.first()
    if run is None:
        raise NotFoundError()
    return run


def run_state(run: Run) -> LoopState | None:
    """The run's latest checkpoint, or None before the worker first saved one."""
    text = (
        Checkpoint.objects.filter(tenant_id=run.tenant_id, run_id=run.run_id)
        .order_by("-seq")
        .values_list("state", flat=True)
        .first()
    )
    return None if text is None else LoopState.from_json(text)


@dataclass(frozen=True)
class TimelineEntry:
    """One checkpoint of a run, as the timeline shows it."""

    seq: int
    phase: str
    saved_at: Any
    state: LoopState


def run_timeline(run: Run, *, after_seq: int = 0, limit: int = 200) -> list[TimelineEntry]:
    """The run's checkpoints, oldest first."""
    rows = (
        Checkpoint.objects.filter(tenant_id=run.tenant_id, run_id=run.run_id, seq__gt=after_seq)
        .order_by("seq")
        .values_list("seq", "phase", "saved_at", "state")[:limit]
    )
    return [
        TimelineEntry(seq, phase, saved_at, LoopState.from_json(text)) for seq, phase, saved_at, text in rows
    ]
