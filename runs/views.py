"""Runs: a filterable list, and one run's page with its timeline, budgets and resume.

Everything shown from a checkpoint (goal, arguments, tool output, answers, verdict
reasons) is untrusted text: templates print it escaped and never mark it safe.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from audit.selectors import audit_heads
from keelgate.errors import KeelgateError
from keelgate.loop import ActionStatus, LoopState, NotReplayableError, Recording, StopReason, replay
from runs.agents import agent_names
from runs.engine.stores import DjangoCheckpointStore
from runs.forms import LIMIT_FIELDS, StartForm, parse_limits
from runs.models import Run, RunStatus
from runs.outcomes import RunOutcome
from runs.presentation import OUTCOME_WORDS, outcome_story, outcome_words
from runs.selectors import (
    RUN_LIST,
    STOP_REASONS,
    action_stories,
    run_cancel_note,
    run_get,
    run_page,
    run_state,
    run_summaries,
    run_timeline,
    run_words,
)
from runs.services import run_resume, run_start
from sitekit.api import CURSOR
from sitekit.console_errors import refusal_or_raise
from sitekit.errors import InvalidCursorError
from sitekit.pages import console_page, flash_refusal
from tenants.models import Role
from tenants.selectors import allows, tenant_ids

PAGE_SIZE = 50
TIMELINE_LIMIT = 200
ACTIVE = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.WAITING)
"""Statuses that can change without anyone on this page doing something (it updates live)."""


# -- the list --------------------------------------------------------------------------


@dataclass(frozen=True)
class ListFilters:
    """The list's filters, as read from the query string (a value not offered is no filter)."""

    status: str = ""
    agent: str = ""
    stop_reason: str = ""
    outcome: str = ""
    q: str = ""
    cursor: str = ""

    @classmethod
    def read(cls, data: Mapping[str, str]) -> ListFilters:
        cursor = data.get("cursor") or ""
        return cls(**RUN_LIST.parse(data), cursor=cursor if re.fullmatch(CURSOR, cursor) else "")

    @property
    def chosen(self) -> dict[str, str]:
        """The filters by name, as :data:`runs.selectors.RUN_LIST` takes them ("" is none)."""
        return {
            "status": self.status,
            "agent": self.agent,
            "stop_reason": self.stop_reason,
            "outcome": self.outcome,
            "q": self.q,
        }

    def query(self, *, cursor: str | None = None) -> str:
        """The filters as a query string (and a page's cursor, if given)."""
        return urlencode({k: v for k, v in {**self.chosen, "cursor": cursor or ""}.items() if v})


def _since_json(ids: list[str]) -> str:
    """The chain heads before the page reads anything: the socket catches up from there.

    Events committed between this render and the socket's connection would otherwise
    never refresh the page's live parts (the socket starts at the heads it sees).
    """
    return json.dumps(audit_heads(ids), sort_keys=True)


def _list_context(request: HttpRequest, start: StartForm | None = None) -> dict[str, Any]:
    filters = ListFilters.read(request.GET)
    ids = tenant_ids(request)
    since_json = _since_json(ids)
    try:
        page = run_page(
            tenant_ids=ids, filters=filters.chosen, cursor=filters.cursor or None, limit=PAGE_SIZE
        )
    except InvalidCursorError:
        page = run_page(tenant_ids=ids, filters=filters.chosen, cursor=None, limit=PAGE_SIZE)
        filters = replace(filters, cursor="")
    agents = agent_names()
    starters = [t for t in ids if allows(request, t, Role.APPROVER)]
    start = start or (StartForm.blank(agents=agents) if starters else None)
    return {
        "since_json": since_json,
        "summaries": [(summary, outcome_words(summary.run.outcome)) for summary in run_summaries(page.rows)],
        "filters": filters,
        "query": filters.query(),
        "rows_query": filters.query(cursor=filters.cursor),
        "next_query": filters.query(cursor=page.next_cursor) if page.next_cursor else "",
        "statuses": [s.value for s in RunStatus],
        "agents": agents,
        "reasons": [r.value for r in StopReason],
        "outcomes": [(o.value, OUTCOME_WORDS[o].badge) for o in RunOutcome],
        "several_tenants": len(ids) > 1,
        "starters": starters,
        "start": start,
        "limit_fields": [
            {
                "name": name,
                "label": label,
                "value": start.values.get(name, ""),
                "invalid": name in start.errors,
            }
            for name, (label, _) in LIMIT_FIELDS.items()
        ]
        if start
        else [],
    }


@require_GET
@console_page
def run_list(request: HttpRequest) -> HttpResponse:
    """The user's runs, newest first, each saying what happened; search, filters, start a run."""
    return render(request, "runs/list.html", _list_context(request))


@require_GET
@console_page
def run_rows(request: HttpRequest) -> HttpResponse:
    """The list's rows alone: the filter form swaps them in, and live updates refresh them."""
    context = _list_context(request)
    response = render(request, "runs/_rows.html", context)
    if request.headers.get("HX-Trigger") == "runs-filters":
        # Typed into the filters: the address bar follows, so reload and back show the same.
        query = context["query"]
        response["HX-Push-Url"] = reverse("runs") + (f"?{query}" if query else "")
    return response


@require_POST
@console_page
def run_start_view(request: HttpRequest) -> HttpResponse:
    """Start a run (an approver), through the same service as ``POST /runs``; then its page.

    A form with errors comes back with what was typed and a 422. A tenant the user does
    not belong to is 404, a role that cannot start runs 403, as for the API.
    """
    starters = [t for t in tenant_ids(request) if allows(request, t, Role.APPROVER)]
    form = StartForm.read(request.POST, tenants=starters or tenant_ids(request))
    if form.request is None:
        return _start_again(request, form)
    try:
        run, created = run_start(
            tenant_id=form.tenant_id,
            agent=form.request.agent,
            goal=form.request.goal,
            user=request.user,
            run_id=form.request.run_id,
            limits=form.limits(),
        )
    except KeelgateError as exc:
        told = refusal_or_raise(exc)
        form.refused(exc, told.text)
        # A whole page, not a card: what the person must correct is 422, as the form's own checks.
        return _start_again(request, form, status=422 if told.status == 400 else told.status)
    if created:
        messages.success(request, f"Started run {run.run_id}: a worker will pick it up.")
    else:
        messages.info(request, f"Run {run.run_id} was already started by this form.")
    return HttpResponseRedirect(reverse("run", args=[run.tenant_id, run.run_id]), status=303)


def _start_again(request: HttpRequest, form: StartForm, status: int = 422) -> HttpResponse:
    """The runs page with the start form open, its errors and what was typed."""
    return render(request, "runs/list.html", _list_context(request, start=form), status=status)


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
        stop = STOP_REASONS.get(run.stop_reason)
    hit = _HIT_BY.get(stop) if stop is not None else None
    return [
        Budget(name, label, float(usage.get(name) or 0), limits.get(name), hit == name, kind)
        for name, (label, kind) in LIMIT_FIELDS.items()
    ]


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
        "words": run_words(run, state),
        # A cancel still asked (the outcome line says who and why once it is done).
        "cancelled": run_cancel_note(run) if run.status == RunStatus.RUNNING else None,
        "story": outcome_story(run, state),
    }


def _timeline_context(run: Run) -> dict[str, Any]:
    """The newest ``TIMELINE_LIMIT`` checkpoints: one entry per action, the checkpoints folded."""
    first = max(0, run.seq - TIMELINE_LIMIT)
    entries = run_timeline(run, after_seq=first, limit=TIMELINE_LIMIT)
    state = entries[-1].state if entries else None
    return {
        "run": run,
        "state": state,
        "stories": action_stories(entries),
        "checkpoints": entries,
        "truncated": first > 0,
        "story": outcome_story(run, state),
    }


@require_GET
@console_page
def run_detail(request: HttpRequest, tenant_id: str, run_id: str) -> HttpResponse:
    """One run: status, budgets, cancel and resume, and its timeline (live)."""
    since_json = _since_json([tenant_id] if tenant_id in tenant_ids(request) else [])
    run = run_get(tenant_ids=tenant_ids(request), run_id=run_id, tenant_id=tenant_id)
    context = _timeline_context(run)
    context.update(_status_context(request, run, context["state"]), since_json=since_json)
    return render(request, "runs/detail.html", context)


@require_GET
@console_page
def run_timeline_view(request: HttpRequest, tenant_id: str, run_id: str) -> HttpResponse:
    """The timeline alone: live updates refresh it when the run's events arrive."""
    run = run_get(tenant_ids=tenant_ids(request), run_id=run_id, tenant_id=tenant_id)
    return render(request, "runs/_timeline.html", _timeline_context(run))


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
        problem = str(exc)  # with its detail: why (not found, pruned)
    return render(request, "runs/replay.html", {"run": run, "report": report, "problem": problem})


@require_GET
@console_page
def run_status(request: HttpRequest, tenant_id: str, run_id: str) -> HttpResponse:
    """The run's status block alone: live updates refresh it when the run's events arrive."""
    run = run_get(tenant_ids=tenant_ids(request), run_id=run_id, tenant_id=tenant_id)
    context = _status_context(request, run, run_state(run))
    return render(request, "runs/_status.html", context)


@require_POST
@console_page
def run_resume_view(request: HttpRequest, tenant_id: str, run_id: str) -> HttpResponse:
    """Resume a stopped run with the limits in the form (empty field: no limit)."""
    run = run_get(tenant_ids=tenant_ids(request), run_id=run_id, tenant_id=tenant_id)
    back = reverse("run", args=[run.tenant_id, run.run_id])
    limits, errors = parse_limits(request.POST)
    if errors:
        for error in errors.values():
            messages.error(request, error)
        return HttpResponseRedirect(back, status=303)
    try:
        run_resume(tenant_id=run.tenant_id, run_id=run.run_id, user=request.user, limits=limits)
    except KeelgateError as exc:
        flash_refusal(request, exc)
        return HttpResponseRedirect(back, status=303)
    shown = ", ".join(f"{k}={v}" for k, v in limits.items()) or "no limits"
    messages.success(request, f"Resumed with {shown}: a worker will pick the run up.")
    return HttpResponseRedirect(back, status=303)
