"""The agents ``mcp:<upstream>``: a tenant's upstream as the agent whose runs are its WRITE calls.

Registered as the source of the ``mcp`` prefix (``runs.agents.register_agent_source``), so
the worker, a decision in the console and the API build the same agent, with the same
policy, for a run of agent ``mcp:<upstream>``: the tenant's upstream, its tools as last
listed, each forwarding with :func:`keelgate.contrib.mcp.upstream_tool`.
"""

from __future__ import annotations

from typing import Any

from keelgate.contrib.mcp import CallPlanner, gateway_name, load_policy, parse_goal, upstream_tool
from keelgate.loop import StopConditions
from mcp_gateway.models import Upstream
from mcp_gateway.selectors import upstream_get
from runs.agents import Agent
from sitekit.errors import UnknownAgentError

AGENT_PREFIX = "mcp"


def agent_name(upstream: str) -> str:
    """The agent of an upstream's calls: ``mcp:<upstream>``."""
    return f"{AGENT_PREFIX}:{upstream}"


def upstream_agent(upstream: Upstream) -> Agent:
    """The agent that plays and forwards calls to ``upstream`` under its policy."""
    policy = load_policy(upstream.policy)
    spec = upstream.spec()
    tools = []
    names: dict[str, str] = {}
    for listed in upstream.tools:
        tool: str = listed["name"]
        entry = policy.for_tool(tool)
        name = gateway_name(upstream.name, tool)
        names[name] = tool
        tools.append(
            upstream_tool(
                spec,
                name=name,
                upstream_name=tool,
                side_effect=entry.effect,
                description=str(listed.get("description") or ""),
                timeout=policy.timeout_seconds,
                idempotency_argument=entry.idempotency_argument,
                input_schema=listed.get("inputSchema") or {"type": "object"},
            )
        )
    return Agent(
        name=agent_name(upstream.name),
        planner=CallPlanner(),
        tools=tools,
        grants=["*"],
        policy=policy.approvals(names),
        stop=StopConditions(max_iterations=3),
        validate_goal=_validate_goal,
        upstream=upstream.name,
    )


def mcp_agent(name: str, tenant_id: str | None) -> Agent:
    """The agent ``mcp:<upstream>`` of ``tenant_id`` (UnknownAgentError without one)."""
    upstream = None if tenant_id is None else upstream_get(tenant_id=tenant_id, name=name.partition(":")[2])
    if upstream is None:
        raise UnknownAgentError(name)
    return upstream_agent(upstream)


def _validate_goal(goal: str) -> Any:
    parse_goal(goal)
