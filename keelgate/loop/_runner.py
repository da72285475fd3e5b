"""The pluggable driver: a run described as plain data, and something that runs it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from keelgate._state import LoopLimits
from keelgate.loop._budget import StopConditions
from keelgate.loop._loop import Loop
from keelgate.loop._result import LoopOutcome

__all__ = ["InProcessRunner", "LoopRunner", "LoopSpec"]


@dataclass(frozen=True)
class LoopSpec:
    """Everything needed to start or resume one run, as plain data."""

    tenant_id: str
    agent_id: str
    goal: str
    as_of: datetime
    run_id: str
    trace_id: str | None = None
    limits: dict[str, Any] = field(default_factory=dict)
    """The fields of :class:`~keelgate._state.LoopLimits`; empty means the loop's defaults."""

    def stop(self) -> StopConditions | None:
        """The limits as stop conditions, or None to use the loop's."""
        if not self.limits:
            return None
        return StopConditions.from_limits(LoopLimits.model_validate(self.limits))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data (``as_of`` as ISO text)."""
        data = asdict(self)
        data["as_of"] = self.as_of.isoformat()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LoopSpec:
        """Inverse of :meth:`to_dict`."""
        values = dict(data)
        values["as_of"] = datetime.fromisoformat(values["as_of"])
        return cls(**values)


@runtime_checkable
class LoopRunner(Protocol):
    """Starts a run, or resumes it if a checkpoint exists. Safe to call again after a crash."""

    async def run(self, spec: LoopSpec) -> LoopOutcome:
        """Run or resume ``spec`` until it stops; return the outcome."""
        ...


class InProcessRunner:
    """Runs the loop in the calling process."""

    def __init__(self, loop: Loop | Callable[[LoopSpec], Loop]) -> None:
        self._loop = loop

    async def run(self, spec: LoopSpec) -> LoopOutcome:
        """``Loop.run_or_resume`` for the spec."""
        loop = self._loop if isinstance(self._loop, Loop) else self._loop(spec)
        result = await loop.run_or_resume(
            goal=spec.goal,
            tenant_id=spec.tenant_id,
            agent_id=spec.agent_id,
            as_of=spec.as_of,
            run_id=spec.run_id,
            trace_id=spec.trace_id,
            stop=spec.stop(),
        )
        return LoopOutcome.from_result(result)
