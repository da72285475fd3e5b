"""A run's outcome in words: every page, the API and the docs say it from here.

:data:`OUTCOME_WORDS` holds each outcome's badge and tone, and what it means;
:func:`outcome_story` tells one run's outcome in a sentence, naming who decided and why
(the denier and their note, who cancelled and their note, who settled an unknown outcome
as not executed) and each edit a person made to a call that ran. The strings are plain;
templates escape them (they quote usernames, notes and arguments).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from keelgate.loop import ActionStatus, LoopState
from runs.models import Run
from runs.outcomes import Edit, RunOutcome, deciding_call, edits_of
from runs.selectors import BUDGET_WORDS, STOP_REASONS, run_cancel_note, withdrawn_by

__all__ = ["OUTCOME_WORDS", "OutcomeStory", "OutcomeWords", "edit_words", "outcome_story", "outcome_words"]


@dataclass(frozen=True)
class OutcomeWords:
    """How an outcome shows: its badge, its tone (ok, bad), and what it means."""

    badge: str
    tone: str
    meaning: str


OUTCOME_WORDS: Mapping[str, OutcomeWords] = {
    RunOutcome.COMPLETED: OutcomeWords(
        "completed", "ok", "Done, and every call that changes something ran as the agent asked."
    ),
    RunOutcome.COMPLETED_WITH_EDIT: OutcomeWords(
        "completed with an edit", "ok", "Done, and every such call ran; a person edited one before it ran."
    ),
    RunOutcome.DENIED: OutcomeWords(
        "denied",
        "bad",
        "A call was denied (by a person, by its deadline, or by the gateway's policy): it never ran.",
    ),
    RunOutcome.ABANDONED_UNKNOWN_OUTCOME: OutcomeWords(
        "abandoned after an unknown outcome",
        "bad",
        "A call's outcome was unknown, and it was settled as not executed.",
    ),
    RunOutcome.FAILED: OutcomeWords(
        "failed", "bad", "A call failed, or the run stopped on an error (a person may resume it)."
    ),
    RunOutcome.BUDGET_STOP: OutcomeWords(
        "budget stop", "bad", "A limit was reached; a person may resume it with a larger budget."
    ),
    RunOutcome.CANCELLED: OutcomeWords("cancelled", "bad", "A person cancelled the run; it never continues."),
}
"""Each outcome's words (``tests/site/runs/test_outcomes.py`` checks every one has them)."""


def outcome_words(outcome: str) -> OutcomeWords | None:
    """The words of ``outcome`` (a row's column); None for none; a name this version does not
    know still shows, as itself."""
    if not outcome:
        return None
    return OUTCOME_WORDS.get(outcome) or OutcomeWords(outcome, "bad", "")


@dataclass(frozen=True)
class OutcomeStory:
    """One run's outcome, told: badge, tone, a sentence, who and why, and the edits."""

    outcome: str
    badge: str
    tone: str
    sentence: str
    by: str | None = None
    """Who decided it: the person who denied, cancelled or settled; None if nobody did."""
    note: str | None = None
    """Their note (untrusted: shown escaped), if they gave one."""
    edits: Sequence[Edit] = field(default_factory=list)

    @property
    def edit_lines(self) -> list[str]:
        """Each edit in words: "alice changed quantity from 20 to 15"."""
        return [edit_words(e) for e in self.edits]


def outcome_story(run: Run, state: LoopState | None) -> OutcomeStory | None:
    """What happened in ``run`` (its latest ``state``), or None while it has not ended."""
    if not run.outcome:
        return None
    words = outcome_words(run.outcome)
    assert words is not None  # the run has an outcome
    by, note = None, None
    edits = edits_of(state)
    outcome = run.outcome
    if outcome == RunOutcome.COMPLETED:
        sentence = "Completed as asked."
    elif outcome == RunOutcome.COMPLETED_WITH_EDIT:
        sentence = "Completed with a person's edit: " + "; ".join(edit_words(e) for e in edits) + "."
        by = edits[0].by if edits else None
    elif outcome == RunOutcome.CANCELLED:
        by = run.cancel_requested_by or withdrawn_by(state)
        note = _cancel_note(run) or None
        sentence = f"Cancelled by {by}." if by else "Cancelled."
    elif outcome == RunOutcome.BUDGET_STOP:
        reason = STOP_REASONS.get(run.stop_reason)
        limit = BUDGET_WORDS.get(reason) if reason is not None else None
        sentence = f"Budget stop: {limit or run.stop_reason}."
    else:
        call = deciding_call(state, outcome)
        if call is None:  # a stop on an error (or a row older than its checkpoints)
            code = run.error_code or (state.error.code if state and state.error else "") or run.stop_reason
            sentence = f"Failed: stopped on an error ({code})." if code else "Failed."
        elif call.status is ActionStatus.DENIED:
            by, note, sentence = _denied(call.tool, call.outcome.code, call.approval)
        elif call.status is ActionStatus.ABANDONED:
            by = call.outcome.settled_by
            note = call.outcome.detail or None
            sentence = (
                f"Abandoned: {call.tool}'s outcome was unknown, and {by} settled it as not executed."
                if by
                else f"Abandoned: {call.tool}'s outcome was unknown, and it was settled as not executed."
            )
        else:
            sentence = f"Failed: {call.tool} failed ({call.outcome.code or 'error'})."
    return OutcomeStory(outcome, words.badge, words.tone, sentence, by, note, edits)


def _denied(tool: str, code: str | None, approval: Any) -> tuple[str | None, str | None, str]:
    """Who denied a call, their note, and the sentence."""
    if approval is not None and approval.denied_by:
        note = approval.note or None
        return approval.denied_by, note, f"Denied by {approval.denied_by}: {tool} never ran."
    if approval is not None and approval.expired:
        return None, None, f"Denied: nobody decided {tool} before its deadline; it never ran."
    return None, None, f"Denied by the gateway's policy ({code or 'denied'}): {tool} never ran."


def _cancel_note(run: Run) -> str:
    """The note of the run's cancel (asked of a running run, or applied), "" if none."""
    cancel = run_cancel_note(run)
    return cancel.note if cancel is not None and cancel.note.strip() else ""


def edit_words(edit: Edit) -> str:
    """ "alice changed quantity from 20 to 15 and side from buy to sell"."""
    changes = " and ".join(f"{name} from {_value(old)} to {_value(new)}" for name, old, new in edit.changes)
    who = edit.by or "a person"
    return f"{who} changed {changes}" if changes else f"{who} edited {edit.tool}"


def _value(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, str):
        return value if len(value) <= 60 else value[:59] + "…"
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return text if len(text) <= 60 else text[:59] + "…"
