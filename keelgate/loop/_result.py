"""What a run returns: the live result and its serialisable form."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from keelgate._state import LoopState
from keelgate._types import StopReason

__all__ = ["LoopOutcome", "LoopResult", "is_resumable"]


def is_resumable(reason: StopReason) -> bool:
    """A budget stop, an interruption or an error can continue now; a goal or a human wait cannot."""
    return reason.is_budget or reason in (StopReason.ERROR, StopReason.INTERRUPTED)


@dataclass(frozen=True)
class LoopResult:
    """What a Loop run or resume returns.

    The final state, why it stopped, whether it reached the goal and whether it can be
    resumed.
    """

    state: LoopState
    stop_reason: StopReason
    goal_reached: bool
    resumable: bool

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self.state.run_id

    @property
    def final_answer(self) -> str | None:
        """The accepted final answer, if the goal was reached."""
        return self.state.final_answer if self.goal_reached else None


@dataclass(frozen=True)
class LoopOutcome:
    """The serialisable result of a run."""

    tenant_id: str
    run_id: str
    stop_reason: str
    goal_reached: bool
    resumable: bool
    final_answer: str | None = None
    seq: int = 0
    error_code: str | None = None

    @classmethod
    def from_result(cls, result: LoopResult) -> LoopOutcome:
        """Flatten a :class:`LoopResult` to plain data."""
        state = result.state
        return cls(
            tenant_id=state.tenant_id,
            run_id=state.run_id,
            stop_reason=result.stop_reason.value,
            goal_reached=result.goal_reached,
            resumable=result.resumable,
            final_answer=result.final_answer,
            seq=state.seq,
            error_code=state.error.code if state.error else None,
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LoopOutcome:
        """Inverse of :meth:`to_dict`."""
        return cls(**data)
