"""Monitor loops: a bounded loop run on a schedule, one durable run per tick.

Each tick is its own run, ``<monitor_id>.tick-<n>``, so a tick is checkpointed and
resumed like any other run. The monitor keeps no state of its own: the next tick
number, and whether the last tick is still half done, are read from the checkpoint
store, so a monitor rebuilt after a crash carries on where the dead one stopped.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from keelgate._state import LoopState
from keelgate._types import READ_ONLY, LoopType, Phase, SideEffect, StopReason
from keelgate.checkpoint import CheckpointStore
from keelgate.clock import Clock, SystemClock
from keelgate.errors import ConfigurationError
from keelgate.loop._budget import StopConditions
from keelgate.loop._loop import Loop
from keelgate.loop._result import LoopResult

__all__ = ["MonitorLoop", "MonitorSummary", "Schedule", "tick_unfinished"]


@dataclass(frozen=True)
class Schedule:
    """A fixed interval between monitoring ticks."""

    interval: timedelta | float
    """Seconds (or a timedelta) from the end of one tick to the start of the next."""

    def __post_init__(self) -> None:
        if self.seconds < 0:
            raise ValueError("a schedule's interval cannot be negative")

    @property
    def seconds(self) -> float:
        """The interval in seconds."""
        if isinstance(self.interval, timedelta):
            return self.interval.total_seconds()
        return float(self.interval)


@dataclass(frozen=True)
class MonitorSummary:
    """The outcome of a bounded monitoring session: how many ticks ran and each tick's result."""

    ticks: int
    results: list[LoopResult]


def tick_unfinished(state: LoopState) -> bool:
    """Whether a tick's latest checkpoint is half done, so the next tick must finish it first.

    Unfinished: no stop reason (the process died mid-tick), an interruption, or a wait
    for a human (an approval, an unknown outcome) - starting a fresh tick past a WRITE
    whose outcome is unknown could repeat it. Finished: the goal, a budget stop or an
    error. A budget stop is final for a tick because resuming it with the same limits
    would stop again at once; an error is final because the next tick is the retry.
    """
    if state.phase is Phase.DONE:
        return False
    reason = state.stop_reason
    return reason is None or reason is StopReason.INTERRUPTED or reason.needs_human


class MonitorLoop:
    """Runs a bounded loop on a schedule, finishing a half-done tick after a restart.

    Each tick is its own run, named ``<monitor_id>.tick-<n>``, so ticks are checkpointed
    and resumable independently. The next tick number comes from what is already
    stored: a restarted monitor carries on rather than starting over.

    ``loop_factory`` is called as ``loop_factory(loop_type=..., allowed_side_effects=...)``
    and must pass both through to the :class:`Loop` it builds (a loop that does not is
    refused with :class:`~keelgate.errors.ConfigurationError`); that loop must
    checkpoint into ``store``. A monitor is READ-only unless ``allowed_side_effects``
    says otherwise: the gateway then refuses anything else with
    ``side_effect_not_permitted``. Run one monitor per ``monitor_id`` at a time; a
    second one racing for the same new tick gets :class:`~keelgate.errors.RunExistsError`.

    ``as_of`` is a fixed datetime, a function called at the start of each new tick, or
    None for the clock's time then. ``sleep`` is injectable so tests need not wait.
    """

    def __init__(
        self,
        monitor_id: str,
        *,
        loop_factory: Callable[..., Loop],
        tenant_id: str,
        agent_id: str,
        goal: str,
        store: CheckpointStore,
        schedule: Schedule,
        allowed_side_effects: frozenset[SideEffect] | set[SideEffect] = READ_ONLY,
        stop: StopConditions | None = None,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
        clock: Clock | None = None,
        as_of: datetime | Callable[[], datetime] | None = None,
    ) -> None:
        if not monitor_id:
            raise ConfigurationError("a monitor needs an id")
        self.monitor_id = monitor_id
        self.loop_factory = loop_factory
        self.tenant_id = tenant_id
        self.agent_id = agent_id
        self.goal = goal
        self.store = store
        self.schedule = schedule
        self.allowed_side_effects = frozenset(allowed_side_effects)
        self.stop = stop
        self.sleep = sleep
        self.clock: Clock = clock or SystemClock()
        self.as_of = as_of
        self._pattern = re.compile(rf"{re.escape(monitor_id)}\.tick-([1-9][0-9]*)")

    def tick_run_id(self, n: int) -> str:
        """The run id of tick ``n`` (counting from 1)."""
        return f"{self.monitor_id}.tick-{n}"

    def stored_ticks(self) -> list[int]:
        """The tick numbers that have a checkpoint in this tenant, lowest first."""
        numbers: list[int] = []
        for run_id in self.store.runs(self.tenant_id):
            match = self._pattern.fullmatch(run_id)
            if match is not None:
                numbers.append(int(match.group(1)))
        return sorted(numbers)

    async def tick(self) -> LoopResult:
        """Run, or finish, exactly one tick."""
        loop = self._build_loop()
        ticks = self.stored_ticks()
        if ticks:
            last = self.tick_run_id(ticks[-1])
            state = self.store.load(self.tenant_id, last)
            if state is not None and tick_unfinished(state):
                return await loop.resume(self.tenant_id, last, stop=self.stop)
        number = ticks[-1] + 1 if ticks else 1
        return await loop.run(
            goal=self.goal,
            tenant_id=self.tenant_id,
            agent_id=self.agent_id,
            as_of=self._as_of(),
            run_id=self.tick_run_id(number),
            stop=self.stop,
        )

    async def run_ticks(self, count: int) -> MonitorSummary:
        """Run ``count`` ticks, sleeping ``schedule.interval`` between them."""
        if count < 0:
            raise ValueError("count cannot be negative")
        results: list[LoopResult] = []
        for index in range(count):
            if index:
                await self.sleep(self.schedule.seconds)
            results.append(await self.tick())
        return MonitorSummary(ticks=len(results), results=results)

    def _build_loop(self) -> Loop:
        loop = self.loop_factory(loop_type=LoopType.MONITOR, allowed_side_effects=self.allowed_side_effects)
        if loop.loop_type is not LoopType.MONITOR:
            raise ConfigurationError("the loop factory must pass loop_type through")
        if loop.allowed_side_effects != self.allowed_side_effects:
            raise ConfigurationError("the loop factory must pass allowed_side_effects through")
        return loop

    def _as_of(self) -> datetime:
        if self.as_of is None:
            return self.clock.now()
        if isinstance(self.as_of, datetime):
            return self.as_of
        return self.as_of()
