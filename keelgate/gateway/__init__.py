"""The gateway: tools declared READ, PROPOSE or WRITE, grants, approvals, timeouts."""

from keelgate._types import ALL_SIDE_EFFECTS, READ_ONLY, OnExpiry, SideEffect
from keelgate.gateway._gateway import CallContext, Gateway, GatewayResult
from keelgate.gateway._policy import (
    ApprovalPolicy,
    ApprovalRequirement,
    ApprovalRules,
    Grants,
    NoApproval,
    RequireApproval,
)
from keelgate.gateway._tools import Tool, ToolCall, ToolFn, ToolSpec, tool

__all__ = [
    "ALL_SIDE_EFFECTS",
    "READ_ONLY",
    "ApprovalPolicy",
    "ApprovalRequirement",
    "ApprovalRules",
    "CallContext",
    "Gateway",
    "GatewayResult",
    "Grants",
    "NoApproval",
    "OnExpiry",
    "RequireApproval",
    "SideEffect",
    "Tool",
    "ToolCall",
    "ToolFn",
    "ToolSpec",
    "tool",
]
