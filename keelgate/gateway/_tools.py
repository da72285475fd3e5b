"""Tools: a named function, what it may do to the world, and the schema of its arguments."""

from __future__ import annotations

import copy
import functools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from keelgate._types import SideEffect

__all__ = ["Tool", "ToolCall", "ToolFn", "ToolSpec", "tool"]


@dataclass(frozen=True)
class ToolCall:
    """What a tool is told about the call besides its arguments.

    ``idempotency_key`` is passed through so the downstream system can deduplicate too:
    Keelgate's exactly-once is a property of its own record, and only the downstream
    honouring the key closes the window of a crash inside the tool.
    """

    tenant_id: str
    run_id: str
    action_id: str
    tool: str
    idempotency_key: str


ToolFn = Callable[[Any, ToolCall], Any | Awaitable[Any]]


@dataclass(frozen=True)
class ToolSpec:
    """What a planner is shown of a tool: name, description, side effect, JSON schema."""

    name: str
    description: str
    side_effect: SideEffect
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Tool:
    """A tool the gateway can run: declared READ, PROPOSE or WRITE, with a pydantic schema.

    ``fn(arguments, call)`` receives validated arguments (an instance of
    ``arguments``) and the :class:`ToolCall`; it may be sync or async. It returns
    JSON-serialisable data, which is stored as untrusted text. Raising
    :class:`~keelgate.errors.ToolRejectedError` says the call definitely did not take
    effect; any other exception from a PROPOSE or WRITE tool leaves its outcome unknown.
    """

    name: str
    side_effect: SideEffect
    arguments: type[BaseModel]
    fn: ToolFn
    description: str = ""
    timeout: float | None = None
    """Seconds; a WRITE that times out is an unknown outcome, never retried."""
    describe: Callable[[Any, Sequence[str]], str] | None = None
    """``describe(arguments, observations)``: what the call will do, in plain words, for the
    person who approves it ("buy 10 ACME ≈ 1,015.00 USD at the last quote 101.50").
    ``observations`` are this step's READ outputs (untrusted JSON text); the line is shown
    escaped and never decides anything. One that raises is simply not shown."""

    def impact(self, arguments: Any, observations: Sequence[str]) -> str:
        """The :attr:`describe` line, or "" without a hook or when it fails (the card still shows)."""
        if self.describe is None:
            return ""
        try:
            line = self.describe(arguments, tuple(observations))
        except Exception:  # a display hook must never block a decision
            return ""
        return line[:500] if isinstance(line, str) else ""

    def spec(self) -> ToolSpec:
        """The tool as a planner sees it (built once: the JSON schema is costly to derive)."""
        cached: ToolSpec | None = self.__dict__.get("_spec")
        if cached is None:
            cached = ToolSpec(
                name=self.name,
                description=self.description,
                side_effect=self.side_effect,
                parameters=copy.deepcopy(_json_schema(self.arguments)),
            )
            object.__setattr__(self, "_spec", cached)
        return cached


@functools.cache
def _json_schema(model: type[BaseModel]) -> dict[str, Any]:
    """Per arguments model, not per Tool: a worker builds its agent's tools for every run."""
    return model.model_json_schema()


def tool(
    *,
    side_effect: SideEffect,
    arguments: type[BaseModel],
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
) -> Callable[[ToolFn], Tool]:
    """Declare a function as a :class:`Tool` (name and description default to the function's)."""

    def wrap(fn: ToolFn) -> Tool:
        return Tool(
            name=name or str(getattr(fn, "__name__", "tool")),
            side_effect=side_effect,
            arguments=arguments,
            fn=fn,
            description=(description or (fn.__doc__ or "")).strip(),
            timeout=timeout,
        )

    return wrap
