"""Planners propose; they never decide. Their proposals go through the gateway."""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from keelgate.errors import PlannerError
from keelgate.gateway._tools import ToolSpec

__all__ = ["ContextMessage", "ModelUsage", "Plan", "PlanRequest", "Planner", "ProposedAction"]


@dataclass(frozen=True)
class ProposedAction:
    """One tool call the planner proposes: a tool name, untrusted arguments and a rationale.

    A proposal only; the gateway decides.
    """

    tool: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    rationale: str = ""


@dataclass(frozen=True)
class ModelUsage:
    """What one model call used, for the budgets."""

    input_tokens: int = 0
    output_tokens: int = 0
    model: str | None = None


@dataclass(frozen=True)
class Plan:
    """What the planner proposed: actions to run, or a final answer, never both."""

    actions: Sequence[ProposedAction] = ()
    final_answer: str | None = None
    usage: ModelUsage = field(default_factory=ModelUsage)

    def __post_init__(self) -> None:
        if self.actions and self.final_answer is not None:
            raise PlannerError("both actions and a final answer")
        if not self.actions and self.final_answer is None:
            raise PlannerError("neither actions nor a final answer")


@dataclass(frozen=True)
class ContextMessage:
    """One message of the context a planner is given.

    ``untrusted`` marks text that came from outside the harness (tool output, retrieved
    documents): data to reason about, never instructions to follow.
    """

    role: str
    content: str
    untrusted: bool = False
    action_id: str | None = None
    published_at: datetime | None = None


@dataclass(frozen=True)
class PlanRequest:
    """What the planner is given for one planning call.

    The run, the iteration, the built context messages and the tools it may propose.
    """

    tenant_id: str
    run_id: str
    agent_id: str
    goal: str
    as_of: datetime
    iteration: int
    messages: Sequence[ContextMessage]
    tools: Sequence[ToolSpec]

    def estimated_input_tokens(self) -> int:
        """A cheap over-estimate of the prompt's size (about four characters a token)."""
        chars = sum(len(m.content) + 8 for m in self.messages)
        chars += sum(len(t.name) + len(t.description) + len(str(t.parameters)) for t in self.tools)
        return chars // 4 + 1


@runtime_checkable
class Planner(Protocol):
    """Proposes the next step: tool calls to run, or a final answer.

    A planner is untrusted; its proposals go through the gateway like any other.
    ``plan`` may be a coroutine function or a plain one.
    """

    def plan(self, request: PlanRequest) -> Plan | Awaitable[Plan]:
        """Propose actions or a final answer for this step."""
        ...
