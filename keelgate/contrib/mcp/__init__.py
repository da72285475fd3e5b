"""Any MCP client behind Keelgate: the framework-free half of the MCP gateway (``keelgate[mcp]``).

What a call is (:func:`call_identity`: a retry is the same call), how the gateway names
an upstream's tools (``<upstream>__<tool>``), an upstream's policy (:class:`Policy`: each
tool READ, PROPOSE or WRITE, its approval rule, the argument that carries the key) and a
thin wrapper of the official client (:func:`list_tools`, :func:`call_tool`). The server at
``/mcp/`` that uses them is the site's ``mcp_gateway`` app; docs/mcp.md tells the design.
The core imports nothing of this package.
"""

from keelgate.contrib.mcp._calls import CallArguments, CallPlanner, call_goal, parse_goal, upstream_tool
from keelgate.contrib.mcp._identity import (
    IDEMPOTENCY_KEY_META,
    REPLAYED_META,
    RUN_ID_HEADER,
    RUN_ID_META,
    SEPARATOR,
    CallIdentity,
    IdentityError,
    call_identity,
    canonical_arguments,
    check_upstream_name,
    gateway_name,
    split_name,
)
from keelgate.contrib.mcp._policy import (
    FAIL_CLOSED,
    ApprovalRule,
    Policy,
    PolicyError,
    ToolPolicy,
    load_policy,
)
from keelgate.contrib.mcp._schema import SchemaViolation, check_arguments, offered_schema
from keelgate.contrib.mcp._upstream import (
    IDEMPOTENCY_HEADER,
    UpstreamError,
    UpstreamSpec,
    call_tool,
    list_tools,
)

__all__ = [
    "FAIL_CLOSED",
    "IDEMPOTENCY_HEADER",
    "IDEMPOTENCY_KEY_META",
    "REPLAYED_META",
    "RUN_ID_HEADER",
    "RUN_ID_META",
    "SEPARATOR",
    "ApprovalRule",
    "CallArguments",
    "CallIdentity",
    "CallPlanner",
    "IdentityError",
    "Policy",
    "PolicyError",
    "SchemaViolation",
    "ToolPolicy",
    "UpstreamError",
    "UpstreamSpec",
    "call_goal",
    "call_identity",
    "call_tool",
    "canonical_arguments",
    "check_arguments",
    "check_upstream_name",
    "gateway_name",
    "list_tools",
    "load_policy",
    "offered_schema",
    "parse_goal",
    "split_name",
    "upstream_tool",
]
