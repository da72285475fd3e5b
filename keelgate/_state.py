"""What is checkpointed: a run's whole state as one pydantic model.

Everything a resume needs lives here and nowhere else, so a run can move between
stores (SQLite, the Django ORM, LangGraph) as the same JSON.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from keelgate._types import ActionStatus, LoopType, OnExpiry, Phase, SideEffect, StopReason
from keelgate.errors import message_for

__all__ = [
    "ActionOutcome",
    "ApprovalState",
    "ApprovalVote",
    "ErrorInfo",
    "LoopLimits",
    "LoopState",
    "PlannedAction",
    "Usage",
    "VerdictRecord",
]

_MODEL = ConfigDict(extra="forbid", validate_assignment=False)


class ErrorInfo(BaseModel):
    """A stored error: its stable code and trusted detail (see ``keelgate.errors``)."""

    model_config = _MODEL

    code: str
    detail: str = ""

    @property
    def message(self) -> str:
        """The fixed wording for the code."""
        return message_for(self.code)


class ActionOutcome(BaseModel):
    """What happened to one planned action.

    Status, error code and fixed-wording detail, and the tool output as untrusted JSON
    text.
    """

    model_config = _MODEL

    status: ActionStatus = ActionStatus.PENDING
    code: str | None = None
    detail: str = ""
    output: str | None = None
    """The tool's return value as JSON text. Untrusted: shown escaped, never obeyed."""
    replayed: bool = False
    """True when the result came from the idempotency store instead of running the tool."""
    settled_by: str | None = None
    at: datetime | None = None

    @property
    def message(self) -> str:
        """The fixed wording for ``code`` (empty without a code)."""
        return message_for(self.code) if self.code else ""


class ApprovalVote(BaseModel):
    """One person's approval."""

    model_config = _MODEL

    by: str
    at: datetime
    note: str = ""
    arguments_hash: str = ""
    """``canonical_sha256`` of the arguments this person approved (empty in older checkpoints)."""


class ApprovalState(BaseModel):
    """Why a call waits for people, and what they said so far."""

    model_config = _MODEL

    required: int = 1
    """Distinct approvers needed (2 for four-eyes, M for M-of-N)."""
    approver_roles: list[str] = Field(default_factory=list)
    """When not empty, only a decider holding one of these roles may approve or deny."""
    reason: str = ""
    requested_at: datetime
    expires_at: datetime | None = None
    approvals: list[ApprovalVote] = Field(default_factory=list)
    denied_by: str | None = None
    denied_at: datetime | None = None
    note: str = ""
    expired: bool = False
    arguments_hash: str = ""
    """``canonical_sha256`` of the arguments the approval is for: a vote for other
    arguments never counts, and the gateway refuses to run different ones."""
    edit_of: str | None = None
    """The action this one replaces: a person edited its arguments before approving."""
    impact: str = ""
    """The tool's plain-words line of what the call will do (untrusted: built from observations)."""
    high_impact: bool = False
    """The policy marked it high impact: approving it takes a deliberate second step."""
    replaced_by: str | None = None
    """The action that replaces this one (this one was denied by the edit)."""
    withdrawn: bool = False
    """The run was cancelled while this waited: nobody needs to decide it any more."""
    on_expiry: OnExpiry = "deny"
    """The policy's word on the deadline: deny (fail closed) or escalate once."""
    escalate_to: str | None = None
    """The role the first deadline escalates to (``on_expiry="escalate"``)."""
    escalate_after: timedelta | None = None
    """The escalated deadline's length, counted from the escalation."""
    warn_before: timedelta | None = None
    """How long before each deadline the ``approval.expiring`` warning is due."""
    escalated_to: str | None = None
    """Set once the deadline escalated it: only a decider holding this role counts now."""
    escalated_at: datetime | None = None
    warned_at: datetime | None = None
    """When the latest ``approval.expiring`` warning was given."""
    warned_for: datetime | None = None
    """The deadline that warning was for: one warning per deadline."""

    @property
    def escalates_to(self) -> str | None:
        """The role the current deadline escalates to, or None when it denies."""
        if self.on_expiry != "escalate" or self.escalated_to is not None:
            return None
        return self.escalate_to if self.escalate_after is not None else None

    @property
    def warn_at(self) -> datetime | None:
        """When the current deadline's warning is due, or None without one."""
        if self.expires_at is None or self.warn_before is None:
            return None
        return self.expires_at - self.warn_before

    def expiry_due(self, now: datetime) -> Literal["escalate", "deny"] | None:
        """What the deadline does now: escalate, deny, or nothing (open, or not yet due)."""
        if self.settled or self.expires_at is None or now < self.expires_at:
            return None
        return "escalate" if self.escalates_to is not None else "deny"

    def warning_due(self, now: datetime) -> bool:
        """Open, inside the current deadline's warning window, and not yet warned for it."""
        warn_at = self.warn_at
        if self.settled or warn_at is None or self.expires_at is None:
            return False
        return warn_at <= now < self.expires_at and self.warned_for != self.expires_at

    @property
    def granted(self) -> bool:
        """Enough distinct people approved these very arguments and nobody denied."""
        votes = {v.by for v in self.approvals if v.arguments_hash in ("", self.arguments_hash)}
        open_ = self.denied_by is None and not self.expired and not self.withdrawn
        return open_ and len(votes) >= self.required

    @property
    def remaining(self) -> int:
        """How many more distinct people must approve these arguments (0 once granted)."""
        votes = {v.by for v in self.approvals if v.arguments_hash in ("", self.arguments_hash)}
        return max(self.required - len(votes), 0)

    @property
    def settled(self) -> bool:
        """Approved, denied or expired: nothing more to decide."""
        return self.granted or self.denied_by is not None or self.expired or self.withdrawn


class PlannedAction(BaseModel):
    """One tool call the planner chose, written down before it runs.

    A resume re-submits exactly these arguments and this key; the planner is never
    asked again.
    """

    model_config = _MODEL

    action_id: str
    iteration: int
    tool: str
    arguments: dict[str, Any]
    """As proposed by the planner: untrusted until the gateway validates them."""
    idempotency_key: str
    rationale: str = ""
    side_effect: SideEffect | None = None
    """Known when the tool is registered; None for an unknown tool."""
    outcome: ActionOutcome = Field(default_factory=ActionOutcome)
    approval: ApprovalState | None = None

    @property
    def status(self) -> ActionStatus:
        """Shortcut for ``outcome.status``."""
        return self.outcome.status


class VerdictRecord(BaseModel):
    """A verifier's verdict as kept in the state."""

    model_config = _MODEL

    iteration: int
    decision: str
    reasons: list[str] = Field(default_factory=list)
    flags: list[str] = Field(default_factory=list)
    answer: str = ""


class Usage(BaseModel):
    """What the run has used so far."""

    model_config = _MODEL

    input_tokens: int = 0
    output_tokens: int = 0
    dollars: float = 0.0
    model_calls: int = 0
    active_seconds: float = 0.0
    """Time spent running; time stopped (waiting for a human) is not counted."""

    @property
    def tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens


class LoopLimits(BaseModel):
    """The serialisable part of :class:`~keelgate.loop.StopConditions`, kept with the run."""

    model_config = _MODEL

    max_iterations: int | None = None
    max_tokens: int | None = None
    max_dollars: float | None = None
    timeout_seconds: float | None = None
    max_verifier_rejections: int | None = None


class LoopState(BaseModel):
    """Everything a run needs to resume.

    The goal, the phase, the planned actions and their outcomes, usage, and the trace
    identity. This is what is checkpointed.
    """

    model_config = _MODEL

    tenant_id: str
    run_id: str
    agent_id: str
    goal: str
    as_of: datetime
    trace_id: str
    loop_type: LoopType = LoopType.TASK
    allowed_side_effects: list[SideEffect] = Field(default_factory=lambda: list(SideEffect))
    seq: int = 0
    """Checkpoint sequence number; every save must be newer than the last."""
    phase: Phase = Phase.PLAN
    iteration: int = 0
    """Plan steps taken (model calls that produced a plan)."""
    actions: list[PlannedAction] = Field(default_factory=list)
    final_answer: str | None = None
    verdicts: list[VerdictRecord] = Field(default_factory=list)
    verifier_rejections: int = 0
    usage: Usage = Field(default_factory=Usage)
    limits: LoopLimits = Field(default_factory=LoopLimits)
    stop_reason: StopReason | None = None
    error: ErrorInfo | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None

    def action(self, action_id: str) -> PlannedAction | None:
        """The action with that id, or None."""
        for action in self.actions:
            if action.action_id == action_id:
                return action
        return None

    @property
    def current_actions(self) -> list[PlannedAction]:
        """The actions of the latest plan step."""
        return [a for a in self.actions if a.iteration == self.iteration]

    def to_json(self) -> str:
        """The checkpoint as JSON text (what every store holds)."""
        return self.model_dump_json()

    @classmethod
    def from_json(cls, text: str | bytes) -> LoopState:
        """Load a checkpoint written by :meth:`to_json`."""
        return cls.model_validate_json(text)
