"""The small vocabularies shared by the loop, the gateway and the stores.

They live beneath all three packages so that none of them imports another's
``__init__`` (which would make the import graph circular).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

__all__ = [
    "ALL_SIDE_EFFECTS",
    "READ_ONLY",
    "ActionStatus",
    "LoopType",
    "OnExpiry",
    "Phase",
    "SideEffect",
    "StopReason",
]

OnExpiry = Literal["deny", "escalate"]
"""What an approval's deadline does: deny the call (fail closed), or escalate it once to a
named role with a new deadline (the next deadline then denies)."""


class Phase(StrEnum):
    """Where a run is in its cycle: plan, act, observe, verify, or done."""

    PLAN = "plan"
    ACT = "act"
    OBSERVE = "observe"
    VERIFY = "verify"
    DONE = "done"


class LoopType(StrEnum):
    """The kind of run: a TASK, a read-only VERIFICATION, or a MONITOR tick."""

    TASK = "task"
    VERIFICATION = "verification"
    MONITOR = "monitor"


class StopReason(StrEnum):
    """Why a run stopped.

    The goal was reached, a limit was hit (iterations, tokens, dollars, time), the
    verifier rejected too often, an outcome is unknown, an approval is pending, or an
    error.
    """

    GOAL_REACHED = "goal_reached"
    MAX_ITERATIONS = "max_iterations"
    TOKEN_BUDGET = "token_budget"
    DOLLAR_BUDGET = "dollar_budget"
    COST_UNKNOWN = "cost_unknown"
    TIMEOUT = "timeout"
    VERIFIER_REJECTED = "verifier_rejected"
    OUTCOME_UNKNOWN = "outcome_unknown"
    APPROVAL_PENDING = "approval_pending"
    INTERRUPTED = "interrupted"
    """The host asked the loop to stop at the next phase boundary (a worker's SIGTERM)."""
    CANCELLED = "cancelled"
    """A person cancelled the run: it stopped at a phase boundary and never continues."""
    ERROR = "error"

    @property
    def is_budget(self) -> bool:
        """A limit was hit: the state is kept and a larger budget continues it."""
        return self in _BUDGET

    @property
    def needs_human(self) -> bool:
        """Nothing more happens until a person (or a confirmer) decides."""
        return self in (StopReason.OUTCOME_UNKNOWN, StopReason.APPROVAL_PENDING)


_BUDGET = frozenset(
    {
        StopReason.MAX_ITERATIONS,
        StopReason.TOKEN_BUDGET,
        StopReason.DOLLAR_BUDGET,
        StopReason.COST_UNKNOWN,
        StopReason.TIMEOUT,
        StopReason.VERIFIER_REJECTED,
    }
)


class ActionStatus(StrEnum):
    """Where a planned action stands.

    Pending, done, denied, error, awaiting approval, unknown (may or may not have
    happened) or abandoned.
    """

    PENDING = "pending"
    DONE = "done"
    DENIED = "denied"
    ERROR = "error"
    AWAITING_APPROVAL = "awaiting_approval"
    UNKNOWN = "unknown"
    ABANDONED = "abandoned"

    @property
    def is_final(self) -> bool:
        """Settled for good: the action will never be submitted again."""
        return self in (
            ActionStatus.DONE,
            ActionStatus.DENIED,
            ActionStatus.ERROR,
            ActionStatus.ABANDONED,
        )


class SideEffect(StrEnum):
    """READ changes nothing; PROPOSE drafts something for a person; WRITE changes the world."""

    READ = "read"
    PROPOSE = "propose"
    WRITE = "write"


READ_ONLY: frozenset[SideEffect] = frozenset({SideEffect.READ})
ALL_SIDE_EFFECTS: frozenset[SideEffect] = frozenset(SideEffect)
