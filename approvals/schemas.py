"""Wire formats of the inbox API: inputs (``extra="forbid"``) and outputs, separate classes.

A proposed call's arguments are untrusted: they are returned as JSON values, never
interpreted.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from django.conf import settings
from ninja import Schema
from pydantic import BaseModel, Field

from approvals.models import Approval, ApprovalStatus, StandingApproval, UnknownOutcome
from sitekit.api import (
    INPUT,
    JSON_INTEGER,
    MAX_ID,
    NO_NUL,
    SAYS_SOMETHING,
    SHA256_HEX,
    JsonObject,
    json_value,
)

__all__ = [
    "ARGUMENTS_HASH_REQUIRED",
    "ApprovalOut",
    "ApprovalPageOut",
    "ApproveIn",
    "CancelIn",
    "DenyIn",
    "ReconcileIn",
    "StandingBoundIn",
    "StandingCreateIn",
    "StandingRevokeIn",
    "StandingRuleOut",
    "StandingRulesOut",
    "UnknownOutcomeOut",
    "UnknownOutcomePageOut",
    "approval_out",
    "standing_rule_out",
    "unknown_outcome_out",
]

_IN = INPUT
_TEXT = NO_NUL
_SAYS_SOMETHING = SAYS_SOMETHING
"""A note must hold more than whitespace (and no NUL)."""


ARGUMENTS_HASH_REQUIRED = not settings.KEELGATE_APPROVE_WITHOUT_ARGUMENTS_HASH
"""An approval must name the arguments it approves (``KEELGATE_APPROVE_WITHOUT_ARGUMENTS_HASH``
relaxes it); read once, so the schema and the rule never disagree."""

_SEEN = (
    "The `arguments_hash` of the call you were shown: if the call has other arguments now, "
    "409 `approval_stale` and nothing is approved."
)

if ARGUMENTS_HASH_REQUIRED:

    class _Seen(Schema):
        """Bound to the arguments the approver saw: required."""

        model_config = _IN

        arguments_hash: str = Field(pattern=SHA256_HEX, description=_SEEN)

else:

    class _Seen(Schema):  # type: ignore[no-redef]
        """Bound to the arguments the approver saw, if they say which."""

        model_config = _IN

        arguments_hash: str | None = Field(None, pattern=SHA256_HEX, description=_SEEN)


class ApproveIn(_Seen):
    """Approve what you saw, with an optional note; or edit it first."""

    note: str = Field("", max_length=2_000, pattern=_TEXT)
    confirm_high_impact: bool = Field(
        False, description="Required (true) to approve a call marked `high_impact`; 422 otherwise."
    )
    arguments: JsonObject | None = Field(
        None,
        description=(
            "Edited arguments: validated against the tool's schema (422 "
            "`edited_arguments_invalid` naming the fields). The original call is denied as "
            "edited by you and never runs; the edited call gets its own idempotency key and "
            "your approval. The same arguments as proposed are a plain approval."
        ),
    )


class CancelIn(Schema):
    """Cancel a run, with an optional note saying why."""

    model_config = _IN

    note: str = Field("", max_length=2_000, pattern=_TEXT)


class BulkApproveItemIn(_Seen):
    """One approval of a bulk approve, bound to the arguments you were shown."""

    id: Annotated[int, Field(ge=1, le=MAX_ID), JSON_INTEGER]


class BulkDenyItemIn(Schema):
    """One approval of a bulk deny, optionally bound to the arguments you were shown."""

    model_config = _IN

    id: Annotated[int, Field(ge=1, le=MAX_ID), JSON_INTEGER]
    arguments_hash: str | None = Field(None, pattern=SHA256_HEX)


class BulkApproveIn(Schema):
    """Approve several approvals of one tenant: each its own decision, with an optional note."""

    model_config = _IN

    items: list[BulkApproveItemIn] = Field(min_length=1, max_length=200)
    note: str = Field("", max_length=2_000, pattern=_TEXT)


class BulkDenyIn(Schema):
    """Deny several approvals of one tenant: each its own decision; the note saying why is required."""

    model_config = _IN

    items: list[BulkDenyItemIn] = Field(min_length=1, max_length=200)
    note: str = Field(min_length=1, max_length=2_000, pattern=_SAYS_SOMETHING, description="Why (required).")


class BulkResultOut(Schema):
    """What happened to one approval of a bulk decision."""

    approval_id: int
    run_id: str
    tool: str
    status: str = Field(description="The approval's status after the decision, or `refused`.")
    code: str = Field(description="Why it was refused (`bulk_not_allowed`, an error code), else empty.")
    detail: str = Field(
        "", description="The refusal in words (which rule made it one to decide alone), else empty."
    )


class BulkDecideOut(Schema):
    """One result per item, in the order given."""

    results: list[BulkResultOut]


class DenyIn(Schema):
    """Deny: the note saying why is required."""

    model_config = _IN

    note: str = Field(min_length=1, max_length=2_000, pattern=_SAYS_SOMETHING, description="Why (required).")


class ReconcileIn(Schema):
    """Settle an unknown outcome: did the call take effect? The note says how you know."""

    model_config = _IN

    executed: bool = Field(description="true or false: a JSON boolean, nothing else.")
    note: str = Field(min_length=1, max_length=2_000, pattern=_SAYS_SOMETHING, description="How you know.")
    result: JsonObject | None = Field(
        None,
        description=(
            "What you found downstream (executed only), e.g. the order id: a JSON object of at "
            "most 16 KiB. The planner reads it as the call's untrusted output."
        ),
    )


class VoteOut(BaseModel):
    """One approver's vote so far."""

    by: str
    at: datetime | None
    note: str


class ApprovalOut(BaseModel):
    """A proposed call waiting for (or decided by) people."""

    id: int
    run_id: str
    action_id: str
    agent: str
    tool: str
    arguments: Any = Field(description="The proposed arguments (a JSON value). Untrusted.")
    reason: str
    required: int = Field(description="Distinct approvers needed (2 is four-eyes; M of M-of-N).")
    votes: list[VoteOut]
    approved_by: list[str] = Field(description="Who approved so far, once each.")
    remaining: int = Field(
        description="How many more distinct people must approve; a denial by any one of them ends it."
    )
    approver_roles: list[str] = Field(
        description="When not empty, only a member holding one of these roles (or above) may decide it; "
        "anyone else gets 403 `approval_role_required`."
    )
    status: ApprovalStatus
    requested_at: datetime
    expires_at: datetime | None
    decided_by: str | None
    decided_at: datetime | None
    note: str
    arguments_hash: str = Field(description="Send it back as `arguments_hash` to approve exactly these.")
    goal: str = Field(description="The run's goal. Untrusted text.")
    impact: str = Field(description="What the call will do, in plain words, from the tool. Untrusted.")
    high_impact: bool = Field(description="Approving it needs `confirm_high_impact`.")
    observations: list[Any] = Field(description="What the agent read this step, as JSON values. Untrusted.")
    edit_of: str | None = Field(description="The action this edited call replaces, if any.")
    replaced_by: str | None = Field(description="The edited call that replaced this one, if any.")
    required_role: str = Field(
        description="The least role that may decide it: approver, or the role its deadline escalated it to."
    )
    escalates_to: str | None = Field(
        description="The role `expires_at` hands it to; null when that deadline denies it (fail closed)."
    )
    escalated_to: str | None = Field(
        description="The role its deadline escalated it to, with a new `expires_at`; below it, 403 "
        "`approval_escalated`."
    )
    warned_at: datetime | None = Field(description="When the warning that `expires_at` is near was given.")


class ApprovalPageOut(BaseModel):
    """One page of approvals, newest first; pass ``next_cursor`` as ``cursor`` for the next."""

    items: list[ApprovalOut]
    next_cursor: str | None


class UnknownOutcomeOut(BaseModel):
    """A side-effecting call whose outcome nobody knows, open or settled."""

    id: int
    run_id: str
    action_id: str
    agent: str
    tool: str
    arguments: Any = Field(description="The call's arguments (a JSON value). Untrusted.")
    idempotency_key: str = Field(description="Look the call up downstream by this key.")
    code: str | None
    detected_at: datetime
    settled: bool
    settled_by: str | None
    settled_at: datetime | None
    executed: bool | None
    note: str


class LookupOut(BaseModel):
    """What the agent's system of record said of an unknown outcome's call, by its key.

    It settles nothing: a person still reconciles, saying in their own note how they know."""

    verdict: Literal["executed", "not_executed", "unsure", "unavailable"] = Field(
        description=(
            "`executed` or `not_executed`: the system of record answered; `unsure`: it "
            "answered without saying; `unavailable`: no answer (timed out, failed, or no lookup "
            "for this tool), `problem` says which."
        )
    )
    record: Any = Field(
        None, description="What the system of record holds for the call (a JSON object). Untrusted."
    )
    problem: str = Field(description="Why there is no answer, in fixed words; empty when there is one.")


class UnknownOutcomePageOut(BaseModel):
    """One page of unknown outcomes, newest first."""

    items: list[UnknownOutcomeOut]
    next_cursor: str | None


def _votes(raw: Any) -> list[VoteOut]:
    votes = raw if isinstance(raw, list) else []
    return [
        VoteOut(by=str(v.get("by", "")), at=v.get("at"), note=str(v.get("note", "")))
        for v in votes
        if isinstance(v, dict)
    ]


def approval_out(row: Approval) -> ApprovalOut:
    """The wire form of an inbox row."""
    return ApprovalOut(
        id=row.pk,
        run_id=row.run_id,
        action_id=row.action_id,
        agent=row.agent,
        tool=row.tool,
        arguments=json_value(row.arguments),
        reason=row.reason,
        required=row.required,
        votes=_votes(row.votes),
        approved_by=row.approved_by,
        remaining=row.remaining if row.status == "pending" else 0,
        approver_roles=[str(r) for r in row.approver_roles or []],
        status=row.status,
        requested_at=row.requested_at,
        expires_at=row.expires_at,
        decided_by=row.decided_by or None,
        decided_at=row.decided_at,
        note=row.note,
        arguments_hash=row.arguments_hash,
        goal=row.goal,
        impact=row.impact,
        high_impact=row.high_impact,
        observations=[
            {"tool": str(o.get("tool", "")), "output": json_value(o.get("output"))}
            for o in (row.observations or [])
            if isinstance(o, dict)
        ],
        edit_of=row.edit_of or None,
        replaced_by=row.replaced_by or None,
        required_role=row.required_role,
        escalates_to=row.escalates_to or None,
        escalated_to=row.escalated_to or None,
        warned_at=row.warned_at,
    )


def unknown_outcome_out(row: UnknownOutcome) -> UnknownOutcomeOut:
    """The wire form of an unknown outcome."""
    return UnknownOutcomeOut(
        id=row.pk,
        run_id=row.run_id,
        action_id=row.action_id,
        agent=row.agent,
        tool=row.tool,
        arguments=json_value(row.arguments),
        idempotency_key=row.idempotency_key,
        code=row.code or None,
        detected_at=row.detected_at,
        settled=row.settled,
        settled_by=row.settled_by or None,
        settled_at=row.settled_at,
        executed=row.executed,
        note=row.note,
    )


class StandingBoundIn(Schema):
    """Bounds on one named field of the tool's arguments: ``min`` and/or ``max``, or ``equals``."""

    model_config = _IN

    min: float | None = Field(None, description="The least value allowed (numbers only).")
    max: float | None = Field(None, description="The greatest value allowed (numbers only).")
    equals: str | int | float | bool | None = Field(None, description="The only value allowed.")

    def as_bound(self) -> dict[str, Any]:
        """The bound as the rule stores it: only what was given."""
        return {k: getattr(self, k) for k in ("min", "max", "equals") if k in self.model_fields_set}


class StandingCreateIn(Schema):
    """A standing approval rule: an agent's tool, constraints on its arguments, an expiry."""

    model_config = _IN

    agent: str = Field(min_length=1, max_length=64, pattern=NO_NUL)
    tool: str = Field(min_length=1, max_length=128, pattern=NO_NUL)
    exact_arguments: JsonObject | None = Field(None, description="Only a call with exactly these arguments.")
    bounds: dict[str, StandingBoundIn] | None = Field(
        None, max_length=32, description="Per field of the tool's arguments: `min`, `max` or `equals`."
    )
    expires_in_days: float = Field(
        gt=0, le=3650, description="Required; at most `KEELGATE_STANDING_APPROVAL_MAX_DAYS` (422 otherwise)."
    )
    required: Annotated[int, Field(ge=1, le=10), JSON_INTEGER] = Field(
        1, description="Distinct makers it needs before it is live: the M of the M-of-N calls it may approve."
    )
    note: str = Field("", max_length=2_000, pattern=NO_NUL)


class StandingRevokeIn(Schema):
    """Revoke a standing rule; the note says why (optional)."""

    model_config = _IN

    note: str = Field("", max_length=2_000, pattern=NO_NUL)


class StandingRuleOut(BaseModel):
    """A standing approval rule, live or ended."""

    id: int
    agent: str
    tool: str
    exact_arguments: Any = Field(description="The only arguments it allows, or null. Untrusted.")
    bounds: dict[str, Any]
    required: int = Field(description="Distinct makers it needs before it is live.")
    makers: list[str] = Field(description="Who made it, once each, in order.")
    live: bool = Field(description="It approves matching calls now: enough makers, not expired, not revoked.")
    created_at: datetime
    expires_at: datetime
    revoked_at: datetime | None
    revoked_by: str | None
    uses: int
    last_used_at: datetime | None
    note: str
    source_approval: int | None


class StandingRulesOut(BaseModel):
    """The tenant's standing rules, newest first."""

    items: list[StandingRuleOut]


def standing_rule_out(rule: StandingApproval, *, now: datetime) -> StandingRuleOut:
    """The wire form of a standing rule."""
    return StandingRuleOut(
        id=rule.pk,
        agent=rule.agent,
        tool=rule.tool,
        exact_arguments=rule.exact_arguments,
        bounds=rule.bounds or {},
        required=rule.required,
        makers=rule.maker_names,
        live=rule.live_at(now),
        created_at=rule.created_at,
        expires_at=rule.expires_at,
        revoked_at=rule.revoked_at,
        revoked_by=rule.revoked_by or None,
        uses=rule.uses,
        last_used_at=rule.last_used_at,
        note=rule.note,
        source_approval=rule.source_approval,
    )
