"""What really happened in a run that ended: its outcome, computed from its actions.

The engine's stop reason says why the loop stopped, not what became of the work:
``goal_reached`` only means the planner gave a final answer, and it does so after a
person denied its order too. The site therefore gives every run that ended an
**outcome**, from its status, its stop reason and what happened to the calls that change
the world (its WRITE and PROPOSE actions, except a proposal a person's edit replaced):

=============================  =========================================================
outcome                        when
=============================  =========================================================
``completed``                  done, and every such call ran as the planner asked
``completed_with_edit``        done, every such call ran, one of them as a person edited it
``denied``                     done, and a call was denied: by a person, by its deadline,
                               or refused by the gateway's policy
``abandoned_unknown_outcome``  done, and a call whose outcome was unknown was settled as
                               not executed
``failed``                     done with a call that failed; or stopped on an error
``budget_stop``                stopped on a limit (iterations, tokens, dollars, time,
                               verifier rejections): resumable with a larger budget
``cancelled``                  a person cancelled the run
=============================  =========================================================

When several calls did not all run, the first of denied, abandoned, failed names it. A
run that has not ended (queued, running, waiting for a person) has no outcome: the
column holds ``""`` and the API ``null``. A stopped run a person resumes loses its
outcome until it ends again. The outcome is written with the status, by
``runs.services.run_move`` (the one writer of a run's status), into ``Run.outcome`` and
the ``run.status`` audit event, from which the ``run.finished`` webhook and the
``keelgate_runs_finished`` counter read it. Its words are in ``runs.presentation``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import models

from keelgate.gateway import SideEffect
from keelgate.loop import ActionStatus, LoopState, PlannedAction, StopReason
from runs.models import RunStatus

__all__ = [
    "ENDED",
    "Edit",
    "RunOutcome",
    "counted_calls",
    "deciding_call",
    "edits_of",
    "run_outcome",
]


class RunOutcome(models.TextChoices):
    """What happened in a run that ended (when each applies: the ``runs.outcomes`` module)."""

    COMPLETED = "completed", "Completed"
    COMPLETED_WITH_EDIT = "completed_with_edit", "Completed with an edit"
    DENIED = "denied", "Denied"
    ABANDONED_UNKNOWN_OUTCOME = "abandoned_unknown_outcome", "Abandoned after an unknown outcome"
    FAILED = "failed", "Failed"
    BUDGET_STOP = "budget_stop", "Budget stop"
    CANCELLED = "cancelled", "Cancelled"


ENDED = (RunStatus.DONE, RunStatus.CANCELLED, RunStatus.STOPPED)
"""The statuses a run has an outcome in (the ``run.finished`` webhook's)."""

_NOT_RUN = (
    (ActionStatus.DENIED, RunOutcome.DENIED),
    (ActionStatus.ABANDONED, RunOutcome.ABANDONED_UNKNOWN_OUTCOME),
    (ActionStatus.ERROR, RunOutcome.FAILED),
)
"""A call that did not run, and the outcome it gives a done run, first first."""


def run_outcome(*, status: str, stop_reason: str, state: LoopState | None) -> str:
    """The outcome of a run in ``status`` after ``stop_reason``, from its latest ``state``;
    ``""`` for a run that has not ended."""
    if status == RunStatus.CANCELLED:
        return RunOutcome.CANCELLED
    if status == RunStatus.STOPPED:
        reason = _REASONS.get(stop_reason)
        return RunOutcome.BUDGET_STOP if reason is not None and reason.is_budget else RunOutcome.FAILED
    if status != RunStatus.DONE:
        return ""
    calls = counted_calls(state)
    for action_status, outcome in _NOT_RUN:
        if any(a.status is action_status for a in calls):
            return outcome
    if any(_is_edit(a) for a in calls if a.status is ActionStatus.DONE):
        return RunOutcome.COMPLETED_WITH_EDIT
    return RunOutcome.COMPLETED


_REASONS = {r.value: r for r in StopReason}


def counted_calls(state: LoopState | None) -> list[PlannedAction]:
    """The calls a run's outcome is about: those that change the world, except a proposal
    a person's edit replaced (its replacement counts instead)."""
    if state is None:
        return []
    return [
        a
        for a in state.actions
        if a.side_effect is not SideEffect.READ and not (a.approval is not None and a.approval.replaced_by)
    ]


def deciding_call(state: LoopState | None, outcome: str) -> PlannedAction | None:
    """The call that gave a done run its outcome (the first denied one, ...), or None."""
    wanted = {str(o): s for s, o in _NOT_RUN}.get(outcome)
    if wanted is None:
        return None
    return next((a for a in counted_calls(state) if a.status is wanted), None)


def _is_edit(action: PlannedAction) -> bool:
    return action.approval is not None and action.approval.edit_of is not None


@dataclass(frozen=True)
class Edit:
    """A person's edit of a proposed call, as it ran: who, and each changed field."""

    action_id: str
    """The edited call (the one that ran)."""
    replaces: str
    """The proposal it replaced."""
    tool: str
    by: str
    changes: Sequence[tuple[str, Any, Any]]
    """``(field, proposed, edited)`` for each field the person changed, by field name."""


def edits_of(state: LoopState | None) -> list[Edit]:
    """The edits of the run's calls that ran, in the order proposed."""
    if state is None:
        return []
    edits = []
    for action in state.actions:
        approval = action.approval
        if approval is None or approval.edit_of is None or action.status is not ActionStatus.DONE:
            continue
        original = state.action(approval.edit_of)
        before = original.arguments if original is not None else {}
        after = action.arguments
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        by = approval.approvals[0].by if approval.approvals else ""
        edits.append(
            Edit(
                action_id=action.action_id,
                replaces=approval.edit_of,
                tool=action.tool,
                by=by,
                changes=[(k, before.get(k), after.get(k)) for k in changed],
            )
        )
    return edits
