"""The gateway under a second client framework: a Pydantic AI agent, driven by a scripted model.

The agent reaches the live gateway (conftest.py's ``live``) through Pydantic AI's own MCP
toolset (``MCPToolset``, on FastMCP's client) with nothing Keelgate-specific but the
Bearer key; its model is a ``FunctionModel`` that calls the tools a test plans and reads
their results as a model would. Pydantic AI hands the model a result's content, not its
``_meta``, so the model goes by the result's words: a call that "is queued" or "waits for a
person's approval" it calls again with the same arguments, as the gateway's answer says to,
and a replay shows as the first call's result (the gateway's key in it) with the upstream
still counting one execution.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import UsageLimits

from tests.site.mcp_gateway._live import Live

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("mcp_live")]

QUEUED = "is queued in Keelgate"  # the gateway's words for a call no worker has run yet
AWAITING = "waits for a person's approval"
REISSUES = 60  # how often the model re-issues one unsettled call before it gives up


class ScriptedModel:
    """A model that calls the planned tools in turn, each again while its result contains one of
    ``again_while`` (the gateway's "calling again with the same arguments returns the outcome"),
    then answers. ``seen`` is every tool result it was given, in order."""

    def __init__(self, plan: list[tuple[str, dict[str, Any]]], again_while: tuple[str, ...] = (QUEUED,)):
        self.plan = list(plan)
        self.again_while = again_while
        self.seen: list[tuple[str, Any]] = []
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self._reissued = 0

    async def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        returns = (
            [p for p in last.parts if isinstance(p, ToolReturnPart)] if isinstance(last, ModelRequest) else []
        )
        self.seen.extend((p.tool_name, p.content) for p in returns)
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


async def _run(live: Live, model: ScriptedModel, history: list[ModelMessage] | None = None):
    """One agent run of ``model`` with the gateway as its MCP toolset (alice's key)."""
    toolset = MCPToolset(live.url, headers={"Authorization": f"Bearer {live.keys['alice']}"})
    agent = Agent(FunctionModel(model), toolsets=[toolset])
    return await agent.run(
        "Use the tools as planned.",
        message_history=history,
        usage_limits=UsageLimits(request_limit=None, tool_calls_limit=None),
    )


async def test_a_read_result_reaches_the_model(live: Live):
    """The agent's READ is forwarded once and the upstream's answer is what the model reads."""
    city = f"pai-city-{uuid.uuid4().hex[:6]}"
    model = ScriptedModel([("u__lookup", {"city": city})])
    result = await _run(live, model)
    assert model.seen == [("u__lookup", f"sunny in {city}")]
    assert result.output == "done after 1 calls"
    assert len(live.executions("u", city=city)) == 1


async def test_a_write_runs_once_and_the_agents_retry_gets_the_replay(live: Live):
    """The agent's WRITE runs once at the upstream (with the gateway's key, not the model's);
    the agent calling it again with the same arguments gets that same result back and the
    upstream still counts one execution."""
    text = f"pai-{uuid.uuid4().hex[:6]}"
    arguments = {"to": "ann", "text": text}
    model = ScriptedModel([("u__send", arguments), ("u__send", arguments)])
    await _run(live, model)
    results = [content for tool, content in model.seen if tool == "u__send"]
    settled = [r for r in results if not (isinstance(r, str) and QUEUED in r)]
    assert len(settled) == 2, results  # the call once settled, then the retry
    first, retry = settled
    (execution,) = live.executions("u", text=text)
    assert execution["arguments"]["key"].startswith("kg_")  # the gateway's key, in the policy's argument
    assert isinstance(first, dict) and first["key"] == execution["arguments"]["key"], first
    assert retry == first
    assert [c for c in model.calls if c[0] == "u__send"][-1] == ("u__send", arguments)


async def test_a_write_needing_approval_tells_the_agent_a_person_decides_then_returns_the_result(live: Live):
    """The agent's gated WRITE answers that a person must decide and nothing runs; approved through
    the approvals API (with the arguments' hash), the agent's next identical call returns the
    approved result, executed once."""
    text = f"pai-gated-{uuid.uuid4().hex[:6]}"
    arguments = {"to": "ann", "text": text}
    asking = ScriptedModel([("gated__send", arguments)])
    first = await _run(live, asking)
    assert {tool for tool, _ in asking.seen} == {"gated__send"}
    answer = asking.seen[-1][1]  # after any "queued" answers: a worker had not reached the call yet
    assert isinstance(answer, str)
    assert "person must decide" in answer and "same arguments" in answer, answer
    assert live.executions("gated", text=text) == []

    run = re.search(r"\(run ([^)]+)\)", answer)  # the answer names the run a person finds it under
    assert run, answer
    status, page = live.api("GET", "/approvals?status=pending&limit=200", live.keys["bob"])
    assert status == 200
    (item,) = [a for a in page["items"] if a["run_id"] == run.group(1)]
    assert item["tool"] == "gated__send" and item["arguments"]["text"] == text
    status, _ = live.api(
        "POST",
        f"/approvals/{item['id']}/approve",
        live.keys["bob"],
        {"note": "fine", "arguments_hash": item["arguments_hash"]},
    )
    assert status == 200

    # Approved, the worker forwards it: until then the call still reads as waiting or queued.
    resuming = ScriptedModel([("gated__send", arguments)], again_while=(QUEUED, AWAITING))
    await _run(live, resuming, history=first.all_messages())
    assert {call for call, _ in resuming.calls} == {"gated__send"}
    assert all(args == arguments for _, args in resuming.calls)
    outcome = resuming.seen[-1][1]
    (execution,) = live.executions("gated", text=text)
    assert isinstance(outcome, dict) and outcome["key"] == execution["arguments"]["key"], outcome
