"""Who may call what (grants) and which calls wait for people (approval policy)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Protocol, runtime_checkable

from pydantic import BaseModel

from keelgate._types import OnExpiry, SideEffect
from keelgate.gateway._tools import Tool

__all__ = [
    "ApprovalPolicy",
    "ApprovalRequirement",
    "ApprovalRules",
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


@dataclass(frozen=True)
class ApprovalRequirement:
    """A call must wait for ``approvers`` distinct people; it expires after ``expires_after``.

    ``approver_roles``, when not empty, are the roles whose decisions count: a decider
    who holds none of them is refused (the engine has no roles of its own: the host
    passes the decider's, as for escalation).

    At expiry the call is denied (``on_expiry="deny"``, fail closed), or escalated once
    (``"escalate"``): ``escalate_to`` names the role that must decide it from then on and
    ``escalate_after`` the new deadline's length, after which it is denied. ``warn_before``
    is how long before a deadline the ``approval.expiring`` warning is due.
    """

    approvers: int = 1
    """How many distinct people must approve (``RequireApproval(approvals=M)``)."""
    approver_roles: tuple[str, ...] = ()
    reason: str = "This call changes the world and needs a person's approval."
    expires_after: timedelta | None = None
    high_impact: bool = False
    """Deserves a deliberate second step from the approver (the console asks them to type it)."""
    on_expiry: OnExpiry = "deny"
    escalate_to: str | None = None
    escalate_after: timedelta | None = None
    warn_before: timedelta | None = None


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

    ``approvals=M`` asks for M distinct people (M-of-N): ``approvals=2`` is four-eyes.
    The call runs once the M-th approves; a denial by any one of them ends it, whatever
    the others said. ``approvers=`` is the older spelling of the same number (passing
    both is a ValueError). ``approver_roles=("approver", "admin")`` counts only
    decisions by a person holding one of those roles: as for ``escalate_to``, the engine
    has no roles of its own, and the host passes the decider's ``roles``; anyone else is
    refused (:class:`~keelgate.errors.ApproverRoleError`), for an approve and a deny alike.
    ``high_impact(arguments)`` marks a call as high impact (for example a notional above
    a threshold): it sees only the validated arguments, so it may consult trusted code
    (a price the harness looks up itself) but never a tool's untrusted output.

    What happens at ``expires_after``: ``on_expiry="deny"`` (the default) denies the call,
    fail closed. ``on_expiry="escalate"`` hands it once to the role ``escalate_to`` with a
    new deadline ``escalate_after`` from the escalation (audited as ``approval.escalated``);
    the next deadline denies it. The engine has no roles of its own: it records the role
    and only a decision that names it among the decider's ``roles`` counts. ``warn_before``
    makes each deadline due for one ``approval.expiring`` warning that long before it
    (:meth:`~keelgate.loop.Loop.warn_expiring`). One rule applies to all its tools; give
    tools different expiries with one rule each in :class:`ApprovalRules`.
    """

    def __init__(
        self,
        tools: Iterable[str] = (),
        *,
        side_effects: Iterable[SideEffect] = (),
        approvals: int | None = None,
        approvers: int | None = None,
        approver_roles: Iterable[str] = (),
        reason: str | None = None,
        expires_after: timedelta | None = None,
        high_impact: Callable[[BaseModel], bool] | None = None,
        on_expiry: OnExpiry = "deny",
        escalate_to: str | None = None,
        escalate_after: timedelta | None = None,
        warn_before: timedelta | None = None,
    ) -> None:
        if approvals is not None and approvers is not None:
            raise ValueError("pass approvals or approvers (its older name), not both")
        count = approvals if approvals is not None else approvers if approvers is not None else 1
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError("approvals must be a whole number, at least 1")
        roles = tuple(approver_roles) if not isinstance(approver_roles, str) else (approver_roles,)
        if any(not isinstance(r, str) or not r.strip() for r in roles):
            raise ValueError("approver_roles must be role names")
        _check_expiry(expires_after, on_expiry, escalate_to, escalate_after, warn_before)
        self._tools = frozenset(tools)
        self._side_effects = frozenset(side_effects)
        self._requirement = ApprovalRequirement(
            approvers=count,
            approver_roles=roles,
            reason=reason or ApprovalRequirement.reason,
            expires_after=expires_after,
            on_expiry=on_expiry,
            escalate_to=escalate_to,
            escalate_after=escalate_after,
            warn_before=warn_before,
        )
        self._high_impact = high_impact

    def requirement(self, *, agent_id: str, tool: Tool, arguments: BaseModel) -> ApprovalRequirement | None:
        """The configured requirement when the tool or its side effect is listed."""
        if tool.name not in self._tools and tool.side_effect not in self._side_effects:
            return None
        if self._high_impact is not None and self._high_impact(arguments):
            return replace(self._requirement, high_impact=True)
        return self._requirement


class ApprovalRules:
    """Several approval rules in order: the first that asks for people decides.

    So each tool (or group of tools) may have its own approvers and expiry, for example
    orders escalating to an admin while cancellations are simply denied at expiry.
    """

    def __init__(self, *rules: ApprovalPolicy) -> None:
        self._rules = rules

    def requirement(self, *, agent_id: str, tool: Tool, arguments: BaseModel) -> ApprovalRequirement | None:
        """The first rule's requirement that is not None, or None when no rule asks."""
        for rule in self._rules:
            found = rule.requirement(agent_id=agent_id, tool=tool, arguments=arguments)
            if found is not None:
                return found
        return None


def _positive(value: timedelta | None) -> bool:
    return value is None or value > timedelta(0)


def _check_expiry(
    expires_after: timedelta | None,
    on_expiry: str,
    escalate_to: str | None,
    escalate_after: timedelta | None,
    warn_before: timedelta | None,
) -> None:
    """Refuse an expiry that could not do what it says (ValueError, like ``approvers``)."""
    if on_expiry not in ("deny", "escalate"):
        raise ValueError("on_expiry must be 'deny' or 'escalate'")
    if not (_positive(expires_after) and _positive(escalate_after) and _positive(warn_before)):
        raise ValueError("expires_after, escalate_after and warn_before must be positive")
    if on_expiry == "escalate":
        if expires_after is None or not escalate_to or escalate_after is None:
            raise ValueError("on_expiry='escalate' needs expires_after, escalate_to and escalate_after")
    elif escalate_to is not None or escalate_after is not None:
        raise ValueError("escalate_to and escalate_after need on_expiry='escalate'")
    if warn_before is not None and expires_after is None:
        raise ValueError("warn_before needs expires_after: there is no deadline to warn of")
