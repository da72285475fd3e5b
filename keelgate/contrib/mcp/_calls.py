"""An MCP call as a Keelgate run: its goal, the planner that plays it, the tool that forwards it.

A WRITE (or PROPOSE) call is a run of one action. Its goal is the call itself (tool and
arguments, canonical JSON); :class:`CallPlanner` proposes exactly that call at the
first step and reports its outcome as the final answer at the next, so the loop's
write-ahead, durable key, approvals and unknown outcomes apply to it unchanged, and a
worker, never the request, forwards it. :func:`upstream_tool` is the engine
:class:`~keelgate.gateway.Tool` that forwards a call to its upstream with the key.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

from keelgate.canonical import canonical_json
from keelgate.contrib.mcp._schema import SchemaViolation, check_arguments, offered_schema
from keelgate.contrib.mcp._upstream import UpstreamSpec, call_tool
from keelgate.errors import PlannerError
from keelgate.gateway import SideEffect, Tool, ToolCall
from keelgate.loop import Plan, PlanRequest, ProposedAction

__all__ = ["CallArguments", "CallPlanner", "call_goal", "parse_goal", "upstream_tool"]


def call_goal(tool: str, arguments: Mapping[str, Any]) -> str:
    """The goal of the run that is this call: ``{"arguments": ..., "tool": ...}`` as canonical JSON."""
    return canonical_json({"tool": tool, "arguments": dict(arguments)})


def parse_goal(goal: str) -> tuple[str, dict[str, Any]]:
    """``(tool, arguments)`` of a goal written by :func:`call_goal` (PlannerError otherwise)."""
    try:
        data = json.loads(goal)
        tool, arguments = data["tool"], data["arguments"]
    except (ValueError, KeyError, TypeError) as exc:
        raise PlannerError("the goal is not an MCP call") from exc
    if not isinstance(tool, str) or not isinstance(arguments, dict):
        raise PlannerError("the goal is not an MCP call")
    return tool, arguments


class CallPlanner:
    """Plays back the client's call: the call at the first step, then its outcome as the answer.

    It never invents anything: the only action it proposes is the one in the goal, so a
    resume, an approval or a worker that took over plays the very call the client made.
    """

    def plan(self, request: PlanRequest) -> Plan:
        """Step 1: the call. Later steps: a final answer (the outcome is in the run's actions)."""
        if request.iteration == 1:
            tool, arguments = parse_goal(request.goal)
            return Plan(actions=[ProposedAction(tool=tool, arguments=arguments, rationale="the MCP call")])
        return Plan(final_answer="the MCP call has its outcome")


class CallArguments(BaseModel):
    """Any JSON object: the request validated the arguments against the upstream's schema
    before the run was queued, and the run's goal cannot change after."""

    model_config = ConfigDict(extra="allow")


def schema_arguments(input_schema: Mapping[str, Any], reserved: str | None = None) -> type[CallArguments]:
    """The arguments model of one upstream tool: its input schema (less ``reserved``, the
    argument the gateway fills) is both what the model checks and its JSON schema.

    So a person's edit of a waiting call is held to the upstream's schema by the engine's
    own edit check, and the inbox builds its edit form from that schema.
    """
    shown = offered_schema(input_schema, reserved)

    def as_shown(schema: dict[str, Any]) -> None:
        schema.clear()
        schema.update(copy.deepcopy(shown))

    class ToolArguments(CallArguments):
        model_config = ConfigDict(extra="allow", json_schema_extra=as_shown)

        @model_validator(mode="after")
        def _upstream_schema(self) -> ToolArguments:
            try:
                check_arguments(shown, self.model_dump(mode="json"), reserved=reserved)
            except SchemaViolation as exc:
                raise ValueError(f"{exc.field}: {exc.reason}") from None
            return self

    return ToolArguments


def upstream_tool(
    spec: UpstreamSpec,
    *,
    name: str,
    upstream_name: str,
    side_effect: SideEffect,
    description: str = "",
    timeout: float | None = None,
    idempotency_argument: str | None = None,
    input_schema: Mapping[str, Any] | None = None,
) -> Tool:
    """The engine tool ``name`` that forwards to ``upstream_name`` on ``spec``.

    A PROPOSE or WRITE carries the gateway's idempotency key: in ``idempotency_argument``
    when the policy names one, and in the ``Idempotency-Key`` header over HTTP. The result
    is the upstream's ``CallToolResult`` as JSON; a call that got no answer raises, which
    the gateway makes an error for a READ and an unknown outcome for a WRITE.
    ``input_schema``: the upstream's, which the arguments (a person's edit too) must pass.
    """

    async def forward(arguments: BaseModel, call: ToolCall) -> dict[str, Any]:
        values = arguments.model_dump()
        key = None if side_effect is SideEffect.READ else call.idempotency_key
        if key is not None and idempotency_argument:
            values[idempotency_argument] = key
        return await call_tool(spec, upstream_name, values, idempotency_key=key)

    return Tool(
        name=name,
        side_effect=side_effect,
        arguments=CallArguments
        if input_schema is None
        else schema_arguments(input_schema, idempotency_argument),
        fn=forward,
        description=description,
        timeout=timeout,
    )
