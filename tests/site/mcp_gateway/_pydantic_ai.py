"""A Pydantic AI agent on the gateway, its model scripted: shared by the live tests and the browser's.

The agent reaches ``/mcp/`` through Pydantic AI's own MCP toolset (``MCPToolset``, on
FastMCP's client) with nothing Keelgate-specific but the Bearer key; its model is a
``FunctionModel`` that calls the tools a test plans and reads their results as a model
would. Pydantic AI hands the model a result's content, not its ``_meta``, so the model goes
by the result's words. A result flagged ``isError`` reaches it as an error: the toolset's
default ``tool_error_behavior`` raises ``ModelRetry``, a return part whose ``outcome`` is
``'retried'``, which the model keeps apart in ``errors``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import (
    ERROR_OUTCOMES,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import UsageLimits

QUEUED = "is queued in Keelgate"  # the gateway's words for a call no worker has run yet
AWAITING = "waits for a person's approval"
AGAIN = "Calling this tool again with the same arguments returns the outcome."
REISSUES = 60  # how often the model re-issues one unsettled call before it gives up


class ScriptedModel:
    """A model that calls the planned tools in turn, each again while its result contains one of
    ``again_while`` (the gateway's "calling again with the same arguments returns the outcome"),
    then answers. ``seen`` is every tool result it was given, in order; ``errors`` every error
    result (the result's words), in order."""

    def __init__(self, plan: list[tuple[str, dict[str, Any]]], again_while: tuple[str, ...] = (QUEUED,)):
        self.plan = list(plan)
        self.again_while = again_while
        self.seen: list[tuple[str, Any]] = []
        self.errors: list[tuple[str, str]] = []
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self._reissued = 0

    async def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        parts = last.parts if isinstance(last, ModelRequest) else []
        returns = [p for p in parts if isinstance(p, ToolReturnPart) and p.outcome not in ERROR_OUTCOMES]
        self.seen.extend((p.tool_name, p.content) for p in returns)
        self.errors.extend(
            (p.tool_name, str(p.content))
            for p in parts
            if isinstance(p, ToolReturnPart) and p.outcome in ERROR_OUTCOMES
        )
        if returns and self._unsettled(returns[-1].content) and self._reissued < REISSUES:
            self._reissued += 1
            await asyncio.sleep(0.5)
            return self._call(*self.calls[-1])
        if self.plan:
            self._reissued = 0
            return self._call(*self.plan.pop(0))
        return ModelResponse(parts=[TextPart(f"done after {len(self.calls)} calls")])

    def _unsettled(self, content: Any) -> bool:
        return isinstance(content, str) and any(words in content for words in self.again_while)

    def _call(self, tool: str, arguments: dict[str, Any]) -> ModelResponse:
        self.calls.append((tool, arguments))
        return ModelResponse(parts=[ToolCallPart(tool_name=tool, args=dict(arguments))])


async def run_agent(url: str, key: str, model: ScriptedModel, history: list[ModelMessage] | None = None):
    """One agent run of ``model`` with the gateway at ``url`` as its MCP toolset, as ``key``'s user."""
    toolset = MCPToolset(url, headers={"Authorization": f"Bearer {key}"})
    agent = Agent(FunctionModel(model), toolsets=[toolset])
    return await agent.run(
        "Use the tools as planned.",
        message_history=history,
        usage_limits=UsageLimits(request_limit=None, tool_calls_limit=None),
    )
