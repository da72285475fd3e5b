"""Wire formats of the runs API: inputs (``extra="forbid"``) and outputs, separate classes.

Tool arguments and outputs, the planner's rationale and final answer are untrusted:
they are returned as JSON values or plain strings, never interpreted by the API.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any

from ninja import Schema
from pydantic import BaseModel, ConfigDict, Field, model_validator

from keelgate.loop import LoopState, PlannedAction, StopReason
from runs.models import Run, RunStatus
from runs.outcomes import RunOutcome
from runs.presentation import outcome_story
from runs.selectors import TimelineEntry
from sitekit.api import ACTION_ID, INPUT, JSON_INTEGER, NO_NUL, RUN_ID, json_value

__all__ = [
    "ACTION_ID",
    "AGENT",
    "RUN_ID",
    "ActionOut",
    "CheckpointOut",
    "CheckpointPageOut",
    "EditOut",
    "OutcomeDetailOut",
    "RunDetailOut",
    "RunOut",
    "RunPageOut",
    "RunResumeIn",
    "RunStartIn",
    "StopIn",
    "action_out",
    "checkpoint_out",
    "run_detail_out",
    "run_out",
    "run_page_out",
]

AGENT = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
_TEXT = NO_NUL
_IN = INPUT


# -- inputs ------------------------------------------------------------------------------


class StopIn(Schema):
    """Stop conditions (the run's budget); each is optional, and all are positive."""

    model_config = _IN

    max_iterations: Annotated[int, Field(ge=1, le=10_000), JSON_INTEGER] | None = Field(
        None, description="Plan steps."
    )
    max_tokens: Annotated[int, Field(ge=1, le=10**10), JSON_INTEGER] | None = Field(
        None, description="Input plus output tokens."
    )
    max_dollars: float | None = Field(None, gt=0, le=1_000_000, allow_inf_nan=False)
    timeout_seconds: float | None = Field(None, gt=0, le=30 * 86_400, allow_inf_nan=False)
    max_verifier_rejections: Annotated[int, Field(ge=0, le=1_000), JSON_INTEGER] | None = None

    def limits(self) -> dict[str, Any]:
        """As the services take them."""
        return self.model_dump(exclude_none=True)


class RunStartIn(Schema):
    """Start a run of a registered agent on a goal."""

    model_config = ConfigDict(
        **INPUT, json_schema_extra={"examples": [{"agent": "paper-trader", "goal": "buy 10 ACME"}]}
    )

    agent: str = Field(pattern=AGENT, max_length=64, description="A registered agent's name.")
    goal: str = Field(min_length=1, max_length=4_000, pattern=_TEXT, description="What the agent should do.")
    run_id: str | None = Field(
        None,
        pattern=RUN_ID,
        max_length=128,
        description="Your id for the run: repeating a request with it starts nothing new.",
    )
    limits: StopIn | None = Field(None, description="The run's stop conditions (its budget).")
    stop: StopIn | None = Field(
        None,
        description="Deprecated: the old name of `limits`, ignored when `limits` is given.",
        json_schema_extra={"deprecated": True},
    )

    _one_name = model_validator(mode="after")(lambda self: _limits_under_one_name(self))


class RunResumeIn(Schema):
    """Resume a stopped run, optionally with new (larger) stop conditions."""

    model_config = _IN

    limits: StopIn | None = Field(None, description="The run's new stop conditions.")
    stop: StopIn | None = Field(
        None,
        description="Deprecated: the old name of `limits`, ignored when `limits` is given.",
        json_schema_extra={"deprecated": True},
    )

    _one_name = model_validator(mode="after")(lambda self: _limits_under_one_name(self))


def _limits_under_one_name(payload: Any) -> Any:
    """``stop`` (deprecated) becomes ``limits``, the name every response uses, so a request
    means the same under either name (its idempotency fingerprint too). Given both, the
    new name wins: any request the schema allows is accepted, and means one thing."""
    if payload.stop is not None and payload.limits is None:
        payload.limits = payload.stop
    payload.stop = None
    return payload


# -- outputs -----------------------------------------------------------------------------


class UsageOut(BaseModel):
    """What the run used so far."""

    input_tokens: int = 0
    output_tokens: int = 0
    dollars: float = 0.0
    model_calls: int = 0
    active_seconds: float = 0.0


class LimitsOut(BaseModel):
    """The run's stop conditions (null: no limit of that kind)."""

    max_iterations: int | None = None
    max_tokens: int | None = None
    max_dollars: float | None = None
    timeout_seconds: float | None = None
    max_verifier_rejections: int | None = None


class RunOut(BaseModel):
    """A run as lists show it."""

    run_id: str
    agent: str
    goal: str
    status: RunStatus
    phase: str
    stop_reason: StopReason | None = Field(
        description="Why the engine's loop stopped (`goal_reached`: the planner gave its final answer, "
        "which it also does after a denial). What became of the work is `outcome`."
    )
    outcome: RunOutcome | None = Field(
        description="What really happened, once the run ended (done, cancelled or stopped); null "
        "while it is queued, running or waiting: completed, completed_with_edit, denied, "
        "abandoned_unknown_outcome, failed, budget_stop, cancelled."
    )
    error_code: str | None
    resumable: bool = Field(description="A stopped run (budget or error) can be resumed.")
    iteration: int
    usage: UsageOut
    limits: LimitsOut
    created_by: str
    created_at: datetime
    updated_at: datetime


class VoteOut(BaseModel):
    """One approver's vote."""

    by: str
    at: datetime
    note: str


class ActionApprovalOut(BaseModel):
    """Why an action waits for people, and what they said so far."""

    required: int
    reason: str
    requested_at: datetime
    expires_at: datetime | None
    approvals: list[VoteOut]
    denied_by: str | None
    denied_at: datetime | None
    note: str
    expired: bool


class ActionOut(BaseModel):
    """One planned tool call and its outcome."""

    action_id: str
    iteration: int
    tool: str
    arguments: Any = Field(description="The proposed arguments (a JSON value). Untrusted.")
    idempotency_key: str
    rationale: str = Field(description="The planner's reason. Untrusted text.")
    side_effect: str | None
    status: str = Field(description="pending, done, denied, error, awaiting_approval, unknown or abandoned.")
    code: str | None = Field(description="The outcome's stable error code, if any.")
    message: str = Field(description="The fixed wording for ``code`` (empty without one).")
    detail: str
    output: Any = Field(description="The tool's result (a JSON value, or null). Untrusted.")
    replayed: bool
    settled_by: str | None
    at: datetime | None
    approval: ActionApprovalOut | None


class ErrorInfoOut(BaseModel):
    """Why the run stopped with an error."""

    code: str
    message: str
    detail: str


class ChangeOut(BaseModel):
    """One field a person changed: what the agent proposed, what ran."""

    old: Any
    new: Any


class EditOut(BaseModel):
    """A person's edit of a call that ran (arguments untrusted, as the actions' are)."""

    action_id: str = Field(description="The edited call, the one that ran.")
    replaces: str = Field(description="The proposal it replaced (denied as edited).")
    tool: str
    by: str
    changes: dict[str, ChangeOut]
    words: str = Field(description='The edit in words: "alice changed quantity from 20 to 15".')


class OutcomeDetailOut(BaseModel):
    """The run's outcome, told: who decided it and why, and each edit."""

    summary: str = Field(description='In a sentence: "Denied by bob: place_order never ran."')
    by: str | None = Field(description="The person who denied, cancelled or settled it, if one did.")
    note: str | None = Field(description="Their note, if any. Untrusted text.")
    edits: list[EditOut]


class RunDetailOut(RunOut):
    """A run with its latest state: actions, final answer, error."""

    trace_id: str
    outcome_detail: OutcomeDetailOut | None = Field(description="The outcome told; null with no outcome.")
    final_answer: str | None = Field(description="The agent's answer. Untrusted text.")
    error: ErrorInfoOut | None
    actions: list[ActionOut]


class RunPageOut(BaseModel):
    """One page of runs, newest first; pass ``next_cursor`` as ``cursor`` for the next."""

    items: list[RunOut]
    next_cursor: str | None


class ActionStatusOut(BaseModel):
    """An action's status at a checkpoint."""

    action_id: str
    tool: str
    status: str


class CheckpointOut(BaseModel):
    """One saved state of the run (an entry of its timeline)."""

    seq: int
    phase: str
    saved_at: datetime
    iteration: int
    stop_reason: StopReason | None
    actions: list[ActionStatusOut]


class CheckpointPageOut(BaseModel):
    """Checkpoints oldest first; pass ``next_after_seq`` as ``after_seq`` for more."""

    items: list[CheckpointOut]
    next_after_seq: int | None


# -- building outputs --------------------------------------------------------------------


def _numbers(raw: Any, schema: type[BaseModel]) -> dict[str, Any]:
    """The schema's fields that ``raw`` (a stored JSON object) holds as numbers; the rest default."""
    if not isinstance(raw, dict):
        return {}
    return {k: v for k in _field_names(schema) if isinstance(v := raw.get(k), _NUMBER)}


_NUMBER = (int, float)
"""A tuple, not ``int | float``: ``isinstance`` checks a union slower (docs/performance.md#json-rendering)."""


@functools.cache
def _field_names(schema: type[BaseModel]) -> tuple[str, ...]:
    """``schema.model_fields``, read once: pydantic builds that mapping on every access,
    most of the work of a page of runs (docs/performance.md#json-rendering)."""
    return tuple(schema.model_fields)


RUN_OUT_COLUMNS = (
    "id",
    "run_id",
    "agent",
    "goal",
    "status",
    "phase",
    "stop_reason",
    "outcome",
    "error_code",
    "iteration",
    "usage",
    "limits",
    "created_by",
    "created_at",
    "updated_at",
)
"""What :func:`run_out` reads: a list loads only these (``QuerySet.values``), not the whole row."""


def _run_fields(run: Mapping[str, Any]) -> dict[str, Any]:
    """:class:`RunOut`'s fields from a run's columns (a ``values()`` row, or a model's)."""
    return {
        "run_id": run["run_id"],
        "agent": run["agent"],
        "goal": run["goal"],
        "status": run["status"],
        "phase": run["phase"],
        "stop_reason": run["stop_reason"] or None,
        "outcome": run["outcome"] or None,
        "error_code": run["error_code"] or None,
        "resumable": run["status"] == RunStatus.STOPPED,
        "iteration": run["iteration"],
        "usage": _numbers(run["usage"], UsageOut),
        "limits": _numbers(run["limits"], LimitsOut),
        "created_by": run["created_by"],
        "created_at": run["created_at"],
        "updated_at": run["updated_at"],
    }


def _columns(run: Run) -> dict[str, Any]:
    return {name: getattr(run, name) for name in RUN_OUT_COLUMNS}


def run_out(run: Run) -> RunOut:
    """The list form of a run."""
    return RunOut.model_validate(_run_fields(_columns(run)))


def run_page_out(rows: list[dict[str, Any]], next_cursor: str | None) -> RunPageOut:
    """A page of runs from ``values(*RUN_OUT_COLUMNS)`` rows, validated in one call.

    No model instance per row and one pydantic call for the page, with
    ``sitekit.api.PydanticJSONRenderer`` encoding it: a model and a :class:`RunOut` per row
    made the page markedly slower (docs/performance.md#json-rendering).
    """
    items = [_run_fields(row) for row in rows]
    return RunPageOut.model_validate({"items": items, "next_cursor": next_cursor})


def action_out(action: PlannedAction) -> ActionOut:
    """One action; arguments and output stay JSON text."""
    outcome, approval = action.outcome, action.approval
    return ActionOut(
        action_id=action.action_id,
        iteration=action.iteration,
        tool=action.tool,
        arguments=action.arguments,
        idempotency_key=action.idempotency_key,
        rationale=action.rationale,
        side_effect=action.side_effect.value if action.side_effect else None,
        status=outcome.status.value,
        code=outcome.code,
        message=outcome.message,
        detail=outcome.detail,
        output=json_value(outcome.output),
        replayed=outcome.replayed,
        settled_by=outcome.settled_by,
        at=outcome.at,
        approval=None
        if approval is None
        else ActionApprovalOut(
            required=approval.required,
            reason=approval.reason,
            requested_at=approval.requested_at,
            expires_at=approval.expires_at,
            approvals=[VoteOut(by=v.by, at=v.at, note=v.note) for v in approval.approvals],
            denied_by=approval.denied_by,
            denied_at=approval.denied_at,
            note=approval.note,
            expired=approval.expired,
        ),
    )


def run_detail_out(run: Run, state: LoopState | None) -> RunDetailOut:
    """A run with its latest checkpoint (none yet before a worker claimed it)."""
    fields = _run_fields(_columns(run))
    if state is not None:
        fields["usage"] = state.usage.model_dump()
    return RunDetailOut(
        **fields,
        trace_id=run.trace_id,
        outcome_detail=_outcome_detail(run, state),
        final_answer=state.final_answer if state else None,
        error=None
        if state is None or state.error is None
        else ErrorInfoOut(code=state.error.code, message=state.error.message, detail=state.error.detail),
        actions=[action_out(a) for a in state.actions] if state else [],
    )


def _outcome_detail(run: Run, state: LoopState | None) -> OutcomeDetailOut | None:
    story = outcome_story(run, state)
    if story is None:
        return None
    edits = [
        EditOut(
            action_id=e.action_id,
            replaces=e.replaces,
            tool=e.tool,
            by=e.by,
            changes={name: ChangeOut(old=old, new=new) for name, old, new in e.changes},
            words=words,
        )
        for e, words in zip(story.edits, story.edit_lines, strict=True)
    ]
    return OutcomeDetailOut(summary=story.sentence, by=story.by, note=story.note, edits=edits)


def checkpoint_out(entry: TimelineEntry) -> CheckpointOut:
    """One timeline entry."""
    state = entry.state
    return CheckpointOut(
        seq=entry.seq,
        phase=entry.phase,
        saved_at=entry.saved_at,
        iteration=state.iteration,
        stop_reason=state.stop_reason,
        actions=[
            ActionStatusOut(action_id=a.action_id, tool=a.tool, status=a.status.value) for a in state.actions
        ],
    )
