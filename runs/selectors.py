"""Reads about runs, always scoped to tenants the caller may see."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import QuerySet

from audit.models import AuditEvent
from audit.wiring import integrate_pending
from keelgate.gateway import SideEffect
from keelgate.loop import ActionStatus, LoopState, PlannedAction, StopReason
from runs.agents import agent_names, done_words
from runs.models import Checkpoint, Run, RunStatus
from runs.outcomes import RunOutcome
from sitekit.errors import NotFoundError
from sitekit.paging import Filter, Keyset, Listing, Page, one_of

SEARCH_MAX = 200
"""Longest text ``q`` searches for (longer is cut, not an error)."""


def _search(value: str) -> str:
    return " ".join(value.split())[:SEARCH_MAX]


RUN_LIST = Listing(
    Keyset(Run, "-created_at", "-id"),
    Filter("status", parse=one_of(lambda: [s.value for s in RunStatus])),
    Filter("agent", parse=one_of(agent_names)),
    Filter("stop_reason", parse=one_of(lambda: [r.value for r in StopReason])),
    Filter("outcome", parse=one_of(lambda: list(RunOutcome.values))),
    Filter("q", "run_id", "goal", lookup="icontains", parse=_search),
)
"""The runs, newest first, by status, agent, stop reason and outcome; ``q`` is found in the
run id or the goal. The console's list and the API's read it, each through one selector below."""


def runs_for(
    *,
    tenant_ids: Iterable[str],
    status: str | None = None,
    agent: str | None = None,
    stop_reason: str | None = None,
    outcome: str | None = None,
    q: str | None = None,
) -> QuerySet[Run]:
    """Runs of the given tenants, newest first, filtered (:data:`RUN_LIST`)."""
    filters = {"status": status, "agent": agent, "stop_reason": stop_reason, "outcome": outcome, "q": q}
    return RUN_LIST.filtered(Run.objects.filter(tenant_id__in=list(tenant_ids)), filters)


def run_page(
    *, tenant_ids: Iterable[str], filters: Mapping[str, Any], cursor: str | None, limit: int
) -> Page[Run]:
    """A page of the tenants' runs under ``filters`` (names of :data:`RUN_LIST`), after ``cursor``."""
    return RUN_LIST.page(
        Run.objects.filter(tenant_id__in=list(tenant_ids)), filters, cursor=cursor, limit=limit
    )


def run_rows_page(
    *,
    tenant_ids: Iterable[str],
    columns: tuple[str, ...],
    status: str | None = None,
    agent: str | None = None,
    stop_reason: str | None = None,
    outcome: str | None = None,
    cursor: str | None,
    limit: int,
) -> Page[dict[str, Any]]:
    """:func:`run_page` as ``values(*columns)`` rows, from one statement written once per
    shape (:meth:`~sitekit.paging.Listing.values_page`): the API's list, the hottest read."""
    return RUN_LIST.values_page(
        columns,
        scope={"tenant_id__in": list(tenant_ids)},
        values={"status": status, "agent": agent, "stop_reason": stop_reason, "outcome": outcome},
        cursor=cursor,
        limit=limit,
    )


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
    texts = Checkpoint.objects.chain_texts(run.tenant_id, run.run_id)
    return LoopState.from_json(texts[-1]) if texts else None


@dataclass(frozen=True)
class TimelineEntry:
    """One checkpoint of a run, as the timeline shows it."""

    seq: int
    phase: str
    saved_at: Any
    state: LoopState


def run_timeline(run: Run, *, after_seq: int = 0, limit: int = 200) -> list[TimelineEntry]:
    """The run's checkpoints, oldest first."""
    entries = Checkpoint.objects.entries(run.tenant_id, run.run_id, after_seq=after_seq, limit=limit)
    return [TimelineEntry(e.seq, e.phase, e.saved_at, LoopState.from_json(e.text)) for e in entries]


# -- what happened, in words ----------------------------------------------------------------


@dataclass(frozen=True)
class RunSummary:
    """A run as the list shows it: its row and what happened, in words."""

    run: Run
    words: str
    tone: str
    """ok, bad, wait or active: how the words are coloured."""


STOP_REASONS = {r.value: r for r in StopReason}
"""A run row's ``stop_reason`` text (empty, or one of these) as the engine's StopReason."""

BUDGET_WORDS = {
    StopReason.MAX_ITERATIONS: "iteration limit reached",
    StopReason.TOKEN_BUDGET: "token budget spent",
    StopReason.DOLLAR_BUDGET: "dollar budget spent",
    StopReason.COST_UNKNOWN: "cost unknown against a dollar budget",
    StopReason.TIMEOUT: "time limit reached",
    StopReason.VERIFIER_REJECTED: "the verifier rejected the answer too often",
}


def run_summaries(runs: Sequence[Run]) -> list[RunSummary]:
    """What happened in each run, in words, from its latest checkpoint.

    One query reads the latest checkpoint of every run on the page (``Run.seq`` names
    it), however many runs there are.
    """
    states = Checkpoint.objects.texts_at((run.tenant_id, run.run_id, run.seq) for run in runs if run.seq)
    summaries = []
    for run in runs:
        text = states.get((run.tenant_id, run.run_id))
        words, tone = run_words(run, None if text is None else LoopState.from_json(text))
        summaries.append(RunSummary(run, words, tone))
    return summaries


@dataclass(frozen=True)
class CancelNote:
    """Who cancelled a run (or asked to), when, and why in their words (maybe none)."""

    by: str
    at: datetime | None
    note: str


def run_cancel_note(run: Run) -> CancelNote | None:
    """The cancel of ``run`` as its audit event records it; None if nobody cancelled it."""
    if run.status != RunStatus.CANCELLED and not run.cancel_requested_by:
        return None
    integrate_pending([run.tenant_id])
    row = (
        AuditEvent.objects.filter(
            tenant_id=run.tenant_id, run_id=run.run_id, kind__in=("run.cancelled", "run.cancel_requested")
        )
        .order_by("seq")
        .only("actor", "at", "body")
        .first()
    )
    if row is None:
        return None
    try:
        note = json.loads(row.body).get("note", "")
    except (ValueError, AttributeError):
        note = ""
    try:
        at: datetime | None = datetime.fromisoformat(row.at)
    except ValueError:
        at = None
    return CancelNote(by=row.actor, at=at, note=note if isinstance(note, str) else "")


def withdrawn_by(state: LoopState | None) -> str | None:
    """Who cancelled the run, as its withdrawn calls record it (None: none was withdrawn)."""
    if state is None:
        return None
    return next(
        (
            a.outcome.settled_by
            for a in state.actions
            if a.outcome.code == "run_cancelled" and a.outcome.settled_by
        ),
        None,
    )


def run_words(run: Run, state: LoopState | None) -> tuple[str, str]:
    """One line saying what happened in ``run`` ("order filled", "denied by bob"), and its tone."""
    actions = state.actions if state is not None else []
    calls = [_call_words(run.agent, a) for a in actions if _counts(a)]
    told = "; ".join(words for words, _ in calls)
    status = run.status
    if status == RunStatus.DONE:
        if not calls:
            return "completed", "ok"  # no call changed anything: nothing else to tell
        return told, "ok" if all(tone == "ok" for _, tone in calls) else "bad"
    if status == RunStatus.CANCELLED:
        who = run.cancel_requested_by or withdrawn_by(state) or ""
        return _join(told, f"cancelled by {who}" if who else "cancelled"), "bad"
    if status == RunStatus.WAITING:
        return told or "waiting for a person", "wait"
    if status == RunStatus.STOPPED:
        reason = STOP_REASONS.get(run.stop_reason)
        if reason in BUDGET_WORDS:
            return _join(told, f"budget stop: {BUDGET_WORDS[reason]}"), "bad"
        return _join(told, f"stopped on an error: {run.error_code or run.stop_reason or 'unknown'}"), "bad"
    if status == RunStatus.RUNNING:
        step = f"running, step {run.iteration}" if run.iteration else "running"
        if run.cancel_requested_by:
            step += f", cancel asked by {run.cancel_requested_by}"
        return _join(told, step), "active"
    return _join(told, "queued" if state is not None else "queued, not started yet"), "active"


def _counts(action: PlannedAction) -> bool:
    """Calls that change the world are what a run is about; an edited-away proposal is not."""
    approval = action.approval
    return action.side_effect is not SideEffect.READ and not (approval and approval.replaced_by)


def _call_words(agent: str, action: PlannedAction) -> tuple[str, str]:
    """What became of one call, in words, and its tone."""
    outcome, approval = action.outcome, action.approval
    status, who = outcome.status, outcome.settled_by
    edited = (
        f" (edited by {approval.approvals[0].by})"
        if approval and approval.edit_of and approval.approvals
        else ""
    )
    if status is ActionStatus.DONE:
        return (f"settled as executed by {who}" if who else done_words(agent, action.tool)) + edited, "ok"
    if status is ActionStatus.ABANDONED:
        return (
            "abandoned: " + (f"settled as not executed by {who}" if who else "not executed")
        ) + edited, "bad"
    if status is ActionStatus.DENIED:
        if outcome.code == "run_cancelled":
            return f"{action.tool} withdrawn", "bad"
        if approval is not None and approval.expired:
            return f"{action.tool} approval expired", "bad"
        if approval is not None and approval.denied_by:
            return f"denied by {approval.denied_by}", "bad"
        return f"{action.tool} refused: {outcome.code or 'denied'}", "bad"
    if status is ActionStatus.ERROR:
        return f"{action.tool} failed: {outcome.code or 'error'}", "bad"
    if status is ActionStatus.AWAITING_APPROVAL:
        votes = approval.approvals if approval is not None else []
        so_far = (
            f" ({len(votes)} of {approval.required}: {', '.join(v.by for v in votes)})"
            if approval and votes
            else ""
        )
        return f"waiting for approval of {action.tool}{so_far}", "wait"
    if status is ActionStatus.UNKNOWN:
        return f"unknown outcome of {action.tool}: a person must settle it", "wait"
    if approval is not None and approval.granted:
        names = ", ".join(v.by for v in approval.approvals)
        return f"{action.tool} approved by {names}, about to run", "active"
    return f"{action.tool} about to run", "active"


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


# -- one entry per action: its lifecycle -----------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One moment in an action's life: "proposed", "approved by alice", "done"."""

    words: str
    at: datetime | None = None
    tone: str = ""
    note: str = ""
    """A person's note (untrusted: shown escaped)."""


@dataclass(frozen=True)
class Sighting:
    """A checkpoint at which an action was new or changed."""

    seq: int
    phase: str
    saved_at: datetime
    status: str


@dataclass
class ActionStory:
    """One action as the timeline shows it: its latest state, lifecycle and checkpoints."""

    action: PlannedAction
    steps: list[Step] = field(default_factory=list)
    sightings: list[Sighting] = field(default_factory=list)


def action_stories(entries: Sequence[TimelineEntry]) -> list[ActionStory]:
    """Every action of the run once, in the order proposed, with its lifecycle.

    Built from the checkpoints (oldest first): the latest version of each action says
    who decided what and when; the statuses it passed through (an unknown outcome a
    person later settled) and the checkpoints that changed it come from the history.
    """
    stories: dict[str, ActionStory] = {}
    seen: dict[str, str] = {}
    for entry in entries:
        for action in entry.state.actions:
            dump = action.model_dump_json()
            if seen.get(action.action_id) == dump:
                continue
            seen[action.action_id] = dump
            story = stories.setdefault(action.action_id, ActionStory(action))
            story.action = action
            story.sightings.append(Sighting(entry.seq, entry.phase, entry.saved_at, action.status.value))
    for story in stories.values():
        story.steps = _lifecycle(story)
    return list(stories.values())


def _lifecycle(story: ActionStory) -> list[Step]:
    action, first = story.action, story.sightings[0]
    outcome, approval = action.outcome, action.approval
    steps = [Step("proposed", first.saved_at)]
    if approval is not None:
        if approval.edit_of:
            steps[0] = Step(f"edit of {approval.edit_of}", approval.requested_at)
        needs = f" from {approval.required} people" if approval.required > 1 else ""
        steps.append(Step(f"approval asked{needs}", approval.requested_at, "wait"))
        votes = [Step(f"approved by {v.by}", v.at, "ok", v.note) for v in approval.approvals]
        if approval.escalated_to and approval.escalated_at:
            escalated = f"deadline passed: escalated to {approval.escalated_to}"
            when = approval.requested_at
            votes = sorted(
                [*votes, Step(escalated, approval.escalated_at, "wait")], key=lambda s: s.at or when
            )
        steps += votes
        if approval.replaced_by:
            steps.append(
                Step(
                    f"edited by {approval.denied_by}: {approval.replaced_by} replaces it",
                    approval.denied_at,
                    "bad",
                )
            )
            return steps
        if approval.denied_by:
            steps.append(Step(f"denied by {approval.denied_by}", approval.denied_at, "bad", approval.note))
        if approval.expired:
            steps.append(Step("approval expired", outcome.at, "bad"))
        if approval.withdrawn:
            steps.append(Step(f"withdrawn: run cancelled by {outcome.settled_by}", outcome.at, "bad"))
    unknown = next((s for s in story.sightings if s.status == ActionStatus.UNKNOWN), None)
    if unknown is not None:
        steps.append(Step("outcome unknown", unknown.saved_at, "wait"))
    steps += _ending(action, decided=approval is not None and approval.settled and not approval.granted)
    return steps


def _ending(action: PlannedAction, *, decided: bool) -> list[Step]:
    """Where the action ended (or stands), unless a denial above already said it."""
    outcome, status, who = action.outcome, action.status, action.outcome.settled_by
    if status is ActionStatus.DONE:
        if who:
            recorded = " (result recorded)" if outcome.output is not None else ""
            return [Step(f"settled as executed by {who}{recorded}", outcome.at, "ok", outcome.detail)]
        replayed = " (replayed from the idempotency store)" if outcome.replayed else ""
        return [Step(f"done{replayed}", outcome.at, "ok")]
    if status is ActionStatus.ABANDONED:
        words = f"settled as not executed by {who}" if who else "abandoned"
        return [Step(words, outcome.at, "bad", outcome.detail if who else "")]
    if status is ActionStatus.DENIED:
        return [] if decided else [Step(f"refused: {outcome.code or 'denied'}", outcome.at, "bad")]
    if status is ActionStatus.ERROR:
        return [Step(f"failed: {outcome.code or 'error'}", outcome.at, "bad")]
    if status is ActionStatus.AWAITING_APPROVAL:
        return [Step("waiting for approval", None, "wait")]
    if status is ActionStatus.UNKNOWN:
        return [Step("waiting for a person to settle it", None, "wait")]
    return [Step("runs at the next step", None, "active")]
