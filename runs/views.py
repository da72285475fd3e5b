"""Runs: a filterable list, and one run's page with its timeline, budgets and resume.

Everything shown from a checkpoint (goal, arguments, tool output, answers, verdict
reasons) is untrusted text: templates print it escaped and never mark it safe.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST
from pydantic import ValidationError

from keelgate.loop import (
    ActionStatus,
    ErrorInfo,
    LoopState,
    NotReplayableError,
    PlannedAction,
    Recording,
    StopReason,
    VerdictRecord,
    replay,
)
from runs.agents import agent_names
from runs.engine.stores import DjangoCheckpointStore
from runs.models import Run, RunStatus
from runs.selectors import run_get, run_state, run_timeline, runs_for
from runs.services import run_resume
from sitekit.errors import NotResumableError
from sitekit.pages import console_page
from tenants.models import Role
from tenants.selectors import allows, tenant_ids

PAGE_SIZE = 50
TIMELINE_LIMIT = 200
ACTIVE = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.WAITING)
"""Statuses that can change without anyone on this page doing something: poll them."""


# -- the list --------------------------------------------------------------------------


@require_GET
@console_page
def run_list(request: HttpRequest) -> HttpResponse:
    """The user's runs, newest first, filtered by status, agent and stop reason."""
    statuses = [s.value for s in RunStatus]
    reasons = [r.value for r in StopReason]
    agents = agent_names()
    status = _choice(request.GET.get("status"), statuses)
    agent = _choice(request.GET.get("agent"), agents)
    reason = _choice(request.GET.get("stop_reason"), reasons)
    runs = runs_for(tenant_ids=tenant_ids(request), status=status, agent=agent, stop_reason=reason)
    page = Paginator(runs, PAGE_SIZE).get_page(request.GET.get("page"))
    query = {k: v for k, v in {"status": status, "agent": agent, "stop_reason": reason}.items() if v}
    return render(
        request,
        "runs/list.html",
        {
            "page": page,
            "statuses": statuses,
            "agents": agents,
            "reasons": reasons,
            "selected": {"status": status or "", "agent": agent or "", "stop_reason": reason or ""},
            "query": query,
        },
    )


def _choice(value: str | None, allowed: list[str]) -> str | None:
    """A filter value if it is one of the allowed ones; anything else means no filter."""
    return value if value in allowed else None


# -- one run ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Budget:
    """One stop condition: what the run used against its limit."""

    name: str
    label: str
    used: float
    limit: float | None
    hit: bool
    kind: type = int

    @property
    def percent(self) -> int:
        if not self.limit:
            return 0
        return max(0, min(100, round(100 * self.used / self.limit)))

    @property
    def suggestion(self) -> str:
        """A larger limit to offer when resuming (twice the old one, or what was used plus one)."""
        if self.limit is None:
            return ""
        bigger = max(self.limit * 2, self.used + 1)
        return str(int(bigger)) if self.kind is int else f"{bigger:g}"


_HIT_BY = {
    StopReason.MAX_ITERATIONS: "max_iterations",
    StopReason.TOKEN_BUDGET: "max_tokens",
    StopReason.DOLLAR_BUDGET: "max_dollars",
    StopReason.COST_UNKNOWN: "max_dollars",
    StopReason.TIMEOUT: "timeout_seconds",
    StopReason.VERIFIER_REJECTED: "max_verifier_rejections",
}


def _stop_reason(value: str) -> StopReason | None:
    try:
        return StopReason(value)
    except ValueError:
        return None


def budgets(state: LoopState | None, run: Run) -> list[Budget]:
    """Usage against limits, from the latest checkpoint (the run row before the first one)."""
    if state is not None:
        limits = state.limits.model_dump()
        usage = {
            "max_iterations": state.iteration,
            "max_tokens": state.usage.tokens,
            "max_dollars": state.usage.dollars,
            "timeout_seconds": state.usage.active_seconds,
            "max_verifier_rejections": state.verifier_rejections,
        }
        stop = state.stop_reason
    else:
        limits = dict(run.limits or {})
        usage = {"max_iterations": run.iteration}
        stop = _stop_reason(run.stop_reason)
    hit = _HIT_BY.get(stop) if stop is not None else None
    rows = [
        ("max_iterations", "Iterations", int),
        ("max_tokens", "Tokens", int),
        ("max_dollars", "Dollars", float),
        ("timeout_seconds", "Active seconds", float),
        ("max_verifier_rejections", "Verifier rejections", int),
    ]
    return [
        Budget(name, label, float(usage.get(name) or 0), limits.get(name), hit == name, kind)
        for name, label, kind in rows
    ]


@dataclass
class TimelineRow:
    """One checkpoint, with what changed since the one before it."""

    seq: int
    phase: str
    saved_at: datetime
    iteration: int
    stop_reason: str | None
    error: ErrorInfo | None
    actions: list[PlannedAction] = field(default_factory=list)
    verdicts: list[VerdictRecord] = field(default_factory=list)
    final_answer: str | None = None


def timeline_rows(entries: list[Any]) -> list[TimelineRow]:
    """Checkpoints oldest first, each listing only the actions and verdicts it changed."""
    seen: dict[str, dict[str, Any]] = {}
    verdicts_seen = 0
    answer_seen: str | None = None
    rows = []
    for entry in entries:
        state: LoopState = entry.state
        changed = []
        for action in state.actions:
            dump = action.model_dump(mode="json")
            if seen.get(action.action_id) != dump:
                changed.append(action)
                seen[action.action_id] = dump
        rows.append(
            TimelineRow(
                seq=entry.seq,
                phase=entry.phase,
                saved_at=entry.saved_at,
                iteration=state.iteration,
                stop_reason=state.stop_reason.value if state.stop_reason else None,
                error=state.error,
                actions=changed,
                verdicts=state.verdicts[verdicts_seen:],
                final_answer=state.final_answer if state.final_answer != answer_seen else None,
            )
        )
        verdicts_seen = len(state.verdicts)
        answer_seen = state.final_answer
    return rows


def _status_context(request: HttpRequest, run: Run, state: LoopState | None) -> dict[str, Any]:
    # From the checkpoint the inbox is projected from, so the two always agree.
    actions = state.actions if state is not None else []
    waiting = {
        "approvals": sum(a.status is ActionStatus.AWAITING_APPROVAL for a in actions),
        "unknown": sum(a.status is ActionStatus.UNKNOWN for a in actions),
    }
    return {
        "run": run,
        "state": state,
        "budgets": budgets(state, run),
        "active": run.status in ACTIVE,
        "can_resume": run.status == RunStatus.STOPPED and allows(request, run.tenant_id, Role.APPROVER),
        "can_cancel": run.status not in (RunStatus.DONE, RunStatus.CANCELLED)
        and not run.cancel_requested_by
        and allows(request, run.tenant_id, Role.APPROVER),
        "budget_stop": bool(run.stop_reason) and run.stop_reason in {r.value for r in _HIT_BY},
        "waiting": waiting,
    }


@require_GET
@console_page
def run_detail(request: HttpRequest, tenant_id: str, run_id: str) -> HttpResponse:
    """One run: status, budgets, resume, and the timeline of its checkpoints."""
    run = run_get(tenant_ids=tenant_ids(request), run_id=run_id, tenant_id=tenant_id)
    first = max(0, run.seq - TIMELINE_LIMIT)
    entries = run_timeline(run, after_seq=first, limit=TIMELINE_LIMIT)
    state = entries[-1].state if entries else None
    context = _status_context(request, run, state)
    context.update({"timeline": timeline_rows(entries), "truncated": first > 0, "page_seq": run.seq})
    return render(request, "runs/detail.html", context)


@require_GET
@console_page
def run_replay(request: HttpRequest, tenant_id: str, run_id: str) -> HttpResponse:
    """Replay the run's recording through a fresh in-memory loop and show every divergence.

    Nothing real runs: tools answer with their recorded results. A run whose actions
    are not all settled cannot be replayed, and the page says so.
    """
    run = run_get(tenant_ids=tenant_ids(request), run_id=run_id, tenant_id=tenant_id)
    report, problem = None, ""
    try:
        recording = Recording.from_store(DjangoCheckpointStore(), run.tenant_id, run_id=run.run_id)
        report = asyncio.run(replay(recording))
    except NotReplayableError as exc:
        problem = exc.message
    return render(request, "runs/replay.html", {"run": run, "report": report, "problem": problem})


@require_GET
@console_page
def run_status(request: HttpRequest, tenant_id: str, run_id: str) -> HttpResponse:
    """The run's status block alone: the run page polls it while the run is active."""
    run = run_get(tenant_ids=tenant_ids(request), run_id=run_id, tenant_id=tenant_id)
    context = _status_context(request, run, run_state(run))
    try:
        context["page_seq"] = int(request.GET.get("seq", run.seq))
    except ValueError:
        context["page_seq"] = run.seq
    return render(request, "runs/_status.html", context)


LIMIT_FIELDS: dict[str, type] = {
    "max_iterations": int,
    "max_tokens": int,
    "max_dollars": float,
    "timeout_seconds": float,
    "max_verifier_rejections": int,
}


@require_POST
@console_page
def run_resume_view(request: HttpRequest, tenant_id: str, run_id: str) -> HttpResponse:
    """Resume a stopped run with the limits in the form (empty field: no limit)."""
    run = run_get(tenant_ids=tenant_ids(request), run_id=run_id, tenant_id=tenant_id)
    back = reverse("run", args=[run.tenant_id, run.run_id])
    limits: dict[str, Any] = {}
    for name, kind in LIMIT_FIELDS.items():
        text = request.POST.get(name, "").strip()
        if not text:
            continue
        try:
            value = kind(text)
        except ValueError:
            messages.error(request, f"{name} must be a number.")
            return HttpResponseRedirect(back, status=303)
        if value <= 0:
            messages.error(request, f"{name} must be greater than zero.")
            return HttpResponseRedirect(back, status=303)
        limits[name] = value
    try:
        run_resume(tenant_id=run.tenant_id, run_id=run.run_id, user=request.user, limits=limits)
    except NotResumableError:
        messages.warning(
            request, f"Not resumed: the run is {run.status}, and only a stopped run can be resumed."
        )
        return HttpResponseRedirect(back, status=303)
    except ValidationError:
        messages.error(request, "Those limits are not valid.")
        return HttpResponseRedirect(back, status=303)
    shown = ", ".join(f"{k}={v}" for k, v in limits.items()) or "no limits"
    messages.success(request, f"Resumed with {shown}: a worker will pick the run up.")
    return HttpResponseRedirect(back, status=303)
