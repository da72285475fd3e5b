"""Stop conditions and the arithmetic of budgets.

A call that crosses a token or dollar line has already been paid for, so it is
accepted and its plan saved, but nothing further is acted on. Before a call, the
prompt's estimated size is checked so a call whose input alone would cross the line
is never made. Keelgate ships no prices: a dollar budget with an unpriced model stops
with ``COST_UNKNOWN`` instead of spending unmetered.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta

from keelgate._state import LoopLimits, LoopState
from keelgate._types import StopReason

__all__ = ["ModelPrice", "StopConditions", "cost_of", "limit_reached", "precall_stop"]


@dataclass(frozen=True)
class ModelPrice:
    """Dollars per million input and output tokens of one model."""

    input_per_million: float
    output_per_million: float


@dataclass(frozen=True)
class StopConditions:
    """Limits for one run.

    ``max_iterations`` counts plan steps. ``max_tokens`` and ``max_dollars`` count what
    the model has already used, so a call that crosses the line is accepted, but
    nothing further is paid for or acted on. ``timeout`` is active time: time spent
    stopped, for example waiting for a human, does not count.
    ``max_verifier_rejections`` counts every non-ACCEPT verdict. ``goal`` is checked
    after each observation.

    A dollar budget needs a priced model; with an unpriced one the loop stops with
    COST_UNKNOWN instead of spending unmetered.
    """

    max_iterations: int | None = None
    max_tokens: int | None = None
    max_dollars: float | None = None
    timeout: float | timedelta | None = None
    goal: Callable[[LoopState], bool] | None = None
    max_verifier_rejections: int | None = None

    def to_limits(self) -> LoopLimits:
        """The serialisable part, kept in the checkpoint."""
        timeout = self.timeout.total_seconds() if isinstance(self.timeout, timedelta) else self.timeout
        return LoopLimits(
            max_iterations=self.max_iterations,
            max_tokens=self.max_tokens,
            max_dollars=self.max_dollars,
            timeout_seconds=timeout,
            max_verifier_rejections=self.max_verifier_rejections,
        )

    @classmethod
    def from_limits(
        cls, limits: LoopLimits, goal: Callable[[LoopState], bool] | None = None
    ) -> StopConditions:
        """Rebuild from a checkpoint's limits (the goal predicate is code, passed again)."""
        return cls(
            max_iterations=limits.max_iterations,
            max_tokens=limits.max_tokens,
            max_dollars=limits.max_dollars,
            timeout=limits.timeout_seconds,
            goal=goal,
            max_verifier_rejections=limits.max_verifier_rejections,
        )


def cost_of(
    pricing: Mapping[str, ModelPrice], model: str | None, input_tokens: int, output_tokens: int
) -> float | None:
    """Dollars for a call, or None when the model has no price."""
    if model is None or model not in pricing:
        return None
    price = pricing[model]
    return (input_tokens * price.input_per_million + output_tokens * price.output_per_million) / 1e6


def limit_reached(state: LoopState) -> StopReason | None:
    """A limit already used up, checked at every phase boundary before more work."""
    limits, usage = state.limits, state.usage
    if limits.timeout_seconds is not None and usage.active_seconds >= limits.timeout_seconds:
        return StopReason.TIMEOUT
    if limits.max_tokens is not None and usage.tokens > limits.max_tokens:
        return StopReason.TOKEN_BUDGET
    if limits.max_dollars is not None and usage.dollars > limits.max_dollars:
        return StopReason.DOLLAR_BUDGET
    return None


def precall_stop(
    state: LoopState,
    *,
    estimated_input_tokens: int,
    pricing: Mapping[str, ModelPrice],
    price_model: str | None,
) -> StopReason | None:
    """Refuse a planning call that cannot fit: iterations, tokens, dollars, unknown price."""
    limits, usage = state.limits, state.usage
    if limits.max_iterations is not None and state.iteration >= limits.max_iterations:
        return StopReason.MAX_ITERATIONS
    if limits.max_tokens is not None and (
        usage.tokens >= limits.max_tokens or usage.tokens + estimated_input_tokens > limits.max_tokens
    ):
        return StopReason.TOKEN_BUDGET
    if limits.max_dollars is not None:
        estimate = cost_of(pricing, price_model, estimated_input_tokens, 0)
        if estimate is None:
            return StopReason.COST_UNKNOWN
        if usage.dollars >= limits.max_dollars or usage.dollars + estimate > limits.max_dollars:
            return StopReason.DOLLAR_BUDGET
    return None
