"""Who may call what (grants) and which calls wait for people (approval policy)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Protocol, runtime_checkable

from pydantic import BaseModel

from keelgate._types import SideEffect
from keelgate.gateway._tools import Tool

__all__ = [
    "ApprovalPolicy",
    "ApprovalRequirement",
    "Grants",
    "NoApproval",
    "RequireApproval",
]


class Grants:
    """Which tools each agent may call. ``"*"`` as a tool name grants every tool.

    A grant is necessary, never sufficient: the loop's allowed side effects and the
    approval policy still apply.
    """

    def __init__(self, grants: Mapping[str, Iterable[str]]) -> None:
        self._grants = {agent: frozenset(tools) for agent, tools in grants.items()}

    def allows(self, agent_id: str, tool_name: str) -> bool:
        """True if ``agent_id`` holds a grant for ``tool_name``."""
        tools = self._grants.get(agent_id, frozenset())
        return tool_name in tools or "*" in tools

    def tools_for(self, agent_id: str) -> frozenset[str]:
        """The tool names granted to ``agent_id`` (may contain ``"*"``)."""
        return self._grants.get(agent_id, frozenset())


@dataclass(frozen=True)
class ApprovalRequirement:
    """A call must wait for ``approvers`` distinct people; it expires after ``expires_after``."""

    approvers: int = 1
    reason: str = "This call changes the world and needs a person's approval."
    expires_after: timedelta | None = None
    high_impact: bool = False
    """Deserves a deliberate second step from the approver (the console asks them to type it)."""


@runtime_checkable
class ApprovalPolicy(Protocol):
    """Decides which calls need people. Sees validated arguments; never sees tool output."""

    def requirement(self, *, agent_id: str, tool: Tool, arguments: BaseModel) -> ApprovalRequirement | None:
        """What approval the call needs, or None to run it without asking."""
        ...


class NoApproval:
    """Nothing needs approval."""

    def requirement(self, *, agent_id: str, tool: Tool, arguments: BaseModel) -> ApprovalRequirement | None:
        """Always None."""
        return None


class RequireApproval:
    """Calls to the named tools (or of the given side effects) need people.

    ``approvers=2`` is four-eyes: two distinct people must approve before the call runs.
    ``high_impact(arguments)`` marks a call as high impact (for example a notional above
    a threshold): it sees only the validated arguments, so it may consult trusted code
    (a price the harness looks up itself) but never a tool's untrusted output.
    """

    def __init__(
        self,
        tools: Iterable[str] = (),
        *,
        side_effects: Iterable[SideEffect] = (),
        approvers: int = 1,
        reason: str | None = None,
        expires_after: timedelta | None = None,
        high_impact: Callable[[BaseModel], bool] | None = None,
    ) -> None:
        if approvers < 1:
            raise ValueError("approvers must be at least 1")
        self._tools = frozenset(tools)
        self._side_effects = frozenset(side_effects)
        self._requirement = ApprovalRequirement(
            approvers=approvers,
            reason=reason or ApprovalRequirement.reason,
            expires_after=expires_after,
        )
        self._high_impact = high_impact

    def requirement(self, *, agent_id: str, tool: Tool, arguments: BaseModel) -> ApprovalRequirement | None:
        """The configured requirement when the tool or its side effect is listed."""
        if tool.name not in self._tools and tool.side_effect not in self._side_effects:
            return None
        if self._high_impact is not None and self._high_impact(arguments):
            return replace(self._requirement, high_impact=True)
        return self._requirement
