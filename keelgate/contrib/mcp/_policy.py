"""An upstream's policy: what each of its tools does to the world, and who must agree first.

An MCP server's annotations (``readOnlyHint``, ``destructiveHint``) are hints written by
the server itself, so they decide nothing here: the operator's policy does. A tool the
policy does not name gets the upstream's ``default``, which is a WRITE that needs one
person's approval unless the operator says otherwise (fail closed).

The file is TOML or JSON (:func:`load_policy`)::

    timeout_seconds = 30

    [default]                # tools the policy does not name
    side_effect = "write"
    approval = true

    [tools.search]
    side_effect = "read"

    [tools.send_message]
    side_effect = "write"
    idempotency_argument = "idempotency_key"   # the gateway puts its key here
    approval = { approvals = 2, high_impact = true, expires_after_seconds = 3600,
                 on_expiry = "escalate", escalate_to = "admin", escalate_after_seconds = 7200 }
"""

from __future__ import annotations

import json
import tomllib
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from keelgate.gateway import ApprovalPolicy, ApprovalRules, RequireApproval, SideEffect

__all__ = ["FAIL_CLOSED", "ApprovalRule", "Policy", "PolicyError", "ToolPolicy", "load_policy"]

_STRICT = ConfigDict(extra="forbid", frozen=True)


class PolicyError(ValueError):
    """A policy file that cannot be read or does not validate (the message names the field)."""


class ApprovalRule(BaseModel):
    """The engine's :class:`~keelgate.gateway.RequireApproval`, as a policy file writes it."""

    model_config = _STRICT

    approvals: int | None = Field(None, ge=1, le=10)
    """M distinct people approve before the call is forwarded (2 is four-eyes); 1 if unset."""
    approvers: int | None = Field(None, ge=1, le=10)
    """The older name of ``approvals`` (not both)."""
    approver_roles: tuple[str, ...] = Field((), max_length=8)
    """When set, only decisions by a person holding one of these roles count."""
    reason: str | None = Field(None, max_length=500)
    high_impact: bool = False
    """The approver confirms deliberately (the console asks them to type it)."""
    expires_after_seconds: float | None = Field(None, gt=0)
    on_expiry: Literal["deny", "escalate"] = "deny"
    escalate_to: str | None = Field(None, max_length=64)
    escalate_after_seconds: float | None = Field(None, gt=0)
    warn_before_seconds: float | None = Field(None, gt=0)

    def requirement(self, tool_name: str) -> RequireApproval:
        """This rule for one gateway tool; the engine refuses an expiry that cannot work."""
        return RequireApproval(
            [tool_name],
            approvals=self.approvals,
            approvers=self.approvers,
            approver_roles=self.approver_roles,
            reason=self.reason,
            expires_after=_seconds(self.expires_after_seconds),
            high_impact=(lambda arguments: True) if self.high_impact else None,
            on_expiry=self.on_expiry,
            escalate_to=self.escalate_to,
            escalate_after=_seconds(self.escalate_after_seconds),
            warn_before=_seconds(self.warn_before_seconds),
        )


class ToolPolicy(BaseModel):
    """One tool's side effect, its approval rule (none, the default rule, or one) and key argument."""

    model_config = _STRICT

    side_effect: Literal["read", "propose", "write"] = "write"
    approval: bool | ApprovalRule = False
    idempotency_argument: str | None = Field(None, min_length=1, max_length=64)
    """The argument the gateway fills with its idempotency key (the model never mints it)."""

    @property
    def effect(self) -> SideEffect:
        """As the engine names it."""
        return SideEffect(self.side_effect)

    @property
    def rule(self) -> ApprovalRule | None:
        """The approval rule, or None when the call is forwarded without asking."""
        if self.approval is True:
            return ApprovalRule()
        return self.approval or None

    @model_validator(mode="after")
    def _key_for_writes(self) -> ToolPolicy:
        if self.idempotency_argument and self.side_effect == "read":
            raise ValueError("idempotency_argument: a READ claims no key")
        return self


FAIL_CLOSED = ToolPolicy(side_effect="write", approval=True)
"""What a tool the policy does not name is, unless the upstream's ``default`` says otherwise."""


class Policy(BaseModel):
    """An upstream's policy (the file's top level)."""

    model_config = _STRICT

    default: ToolPolicy = FAIL_CLOSED
    tools: dict[str, ToolPolicy] = Field(default_factory=dict)
    timeout_seconds: float = Field(30.0, gt=0, le=3600)
    """How long one forwarded call may take; a WRITE past it is an unknown outcome."""

    @field_validator("tools")
    @classmethod
    def _names(cls, tools: dict[str, ToolPolicy]) -> dict[str, ToolPolicy]:
        for name in tools:
            if not name or len(name) > 128:
                raise ValueError("a tool name has 1 to 128 characters")
        return tools

    def for_tool(self, tool: str) -> ToolPolicy:
        """The tool's entry, or the default (fail closed unless the operator changed it)."""
        return self.tools.get(tool, self.default)

    def approvals(self, names: dict[str, str]) -> ApprovalPolicy:
        """The engine's approval policy for these tools (``names``: gateway name -> upstream name)."""
        rules: list[ApprovalPolicy] = []
        for gateway_name, upstream_name in sorted(names.items()):
            rule = self.for_tool(upstream_name).rule
            if rule is not None:
                rules.append(rule.requirement(gateway_name))
        return ApprovalRules(*rules)


def load_policy(source: str | Path | dict[str, Any]) -> Policy:
    """A policy from a TOML or JSON file (by its suffix), or from its parsed content.

    Raises :class:`PolicyError` naming what is wrong, including an expiry the engine's
    :class:`~keelgate.gateway.RequireApproval` would refuse.
    """
    if isinstance(source, dict):
        data: Any = source
    else:
        path = Path(source)
        try:
            text = path.read_text(encoding="utf-8")
            data = json.loads(text) if path.suffix.lower() == ".json" else tomllib.loads(text)
        except (OSError, ValueError) as exc:
            raise PolicyError(f"{path}: {exc}") from exc
    try:
        policy = Policy.model_validate(data)
    except ValueError as exc:
        raise PolicyError(str(exc)) from exc
    for name, entry in [("default", policy.default), *policy.tools.items()]:
        rule = entry.rule
        if rule is not None:
            try:
                rule.requirement(name)
            except ValueError as exc:
                raise PolicyError(f"tools.{name}.approval: {exc}") from exc
    return policy


def _seconds(value: float | None) -> timedelta | None:
    return None if value is None else timedelta(seconds=value)
