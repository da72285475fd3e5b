"""The gateway under a second client framework: a Pydantic AI agent, driven by a scripted model.

The agent (``_pydantic_ai.py``) reaches the live gateway (conftest.py's ``live``) through
Pydantic AI's own MCP toolset with nothing Keelgate-specific but the Bearer key, and goes
by the words of the results its model is handed, not their ``_meta``: a call that "is
queued" or "waits for a person's approval" it calls again with the same arguments, as the
answer says to. A READ, a WRITE and its replay, and a gated WRITE that a person approves,
denies, or edits then approves through the approvals API; the upstream's ledger counts the
executions. Approved in the browser: tests/browser/test_mcp.py.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage

from tests.site.mcp_gateway._live import Live
from tests.site.mcp_gateway._pydantic_ai import AGAIN, AWAITING, QUEUED, ScriptedModel, run_agent

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("mcp_live")]


async def _run(live: Live, model: ScriptedModel, history: list[ModelMessage] | None = None):
    """One agent run of ``model`` with the gateway as its MCP toolset (alice's key)."""
    return await run_agent(live.url, live.keys["alice"], model, history)


async def _waiting(live: Live, arguments: dict[str, Any]):
    """The agent's gated WRITE of ``arguments``: its result tells the model that the call waits for
    a person and has not run, and that calling again with the same arguments returns the outcome;
    nothing ran. The run's history and its pending approval (as bob, an approver, sees it)."""
    asking = ScriptedModel([("gated__send", arguments)])
    first = await _run(live, asking)
    assert {tool for tool, _ in asking.seen} == {"gated__send"} and asking.errors == []
    answer = asking.seen[-1][1]  # after any "queued" answers: a worker had not reached the call yet
    assert isinstance(answer, str) and answer.startswith("This call " + AWAITING), answer
    assert "it has not run" in answer and "A person must decide." in answer and answer.endswith(AGAIN), answer
    assert live.executions("gated", text=arguments["text"]) == []
    run = re.search(r"\(run ([^)]+)\)", answer)  # the answer names the run a person finds it under
    assert run, answer
    status, page = live.api("GET", "/approvals?status=pending&limit=200", live.keys["bob"])
    assert status == 200
    (item,) = [a for a in page["items"] if a["run_id"] == run.group(1)]
    assert item["tool"] == "gated__send" and item["arguments"] == arguments
    return first.all_messages(), item


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
    history, item = await _waiting(live, arguments)
    status, _ = live.api(
        "POST",
        f"/approvals/{item['id']}/approve",
        live.keys["bob"],
        {"note": "fine", "arguments_hash": item["arguments_hash"]},
    )
    assert status == 200

    # Approved, the worker forwards it: until then the call still reads as waiting or queued.
    resuming = ScriptedModel([("gated__send", arguments)], again_while=(QUEUED, AWAITING))
    await _run(live, resuming, history=history)
    assert {call for call, _ in resuming.calls} == {"gated__send"}
    assert all(args == arguments for _, args in resuming.calls)
    outcome = resuming.seen[-1][1]
    (execution,) = live.executions("gated", text=text)
    assert isinstance(outcome, dict) and outcome["key"] == execution["arguments"]["key"], outcome


async def test_a_write_denied_with_a_note_tells_the_agent_who_and_why_and_never_runs(live: Live):
    """Denied through the approvals API with a note: the agent's next identical call is an error
    (an ``isError`` result, which Pydantic AI hands the model as a retry: an error tool return) saying bob
    denied it and why; the upstream never ran it."""
    text = f"pai-deny-{uuid.uuid4().hex[:6]}"
    arguments = {"to": "ann", "text": text}
    history, item = await _waiting(live, arguments)
    status, _ = live.api(
        "POST", f"/approvals/{item['id']}/deny", live.keys["bob"], {"note": "not to ann today"}
    )
    assert status == 200

    resuming = ScriptedModel([("gated__send", arguments)], again_while=(QUEUED, AWAITING))
    result = await _run(live, resuming, history=history)
    assert all(call == ("gated__send", arguments) for call in resuming.calls)
    assert all(isinstance(c, str) and (QUEUED in c or AWAITING in c) for _, c in resuming.seen), resuming.seen
    (denial,) = resuming.errors
    assert denial[0] == "gated__send"
    assert "Denied by bob: not to ann today. The call was not forwarded." in denial[1], denial
    assert result.output == f"done after {len(resuming.calls)} calls"
    assert live.executions("gated", text=text) == []


async def test_a_write_edited_then_approved_runs_the_edited_arguments_once_and_the_agent_gets_it(live: Live):
    """Edited then approved through the approvals API (new arguments, with the shown arguments'
    hash): the upstream runs the edited call once and never the proposed one; the agent's next
    identical call (the proposed arguments) returns the edited call's result, and calling once
    more gets the same result back, still one execution."""
    text = f"pai-edit-{uuid.uuid4().hex[:6]}"
    edited = f"{text}-edited"
    arguments = {"to": "ann", "text": text}
    history, item = await _waiting(live, arguments)
    status, body = live.api(
        "POST",
        f"/approvals/{item['id']}/approve",
        live.keys["bob"],
        {
            "arguments_hash": item["arguments_hash"],
            "arguments": {"to": "bea", "text": edited},
            "note": "to bea",
        },
    )
    assert status == 200 and body["status"] == "approved" and body["edit_of"] == item["action_id"], body

    resuming = ScriptedModel([("gated__send", arguments)] * 2, again_while=(QUEUED, AWAITING))
    await _run(live, resuming, history=history)
    assert all(call == ("gated__send", arguments) for call in resuming.calls)
    assert resuming.errors == []
    *_, outcome, again = [content for _, content in resuming.seen]
    assert live.executions("gated", text=text) == []
    (execution,) = live.executions("gated", text=edited)
    assert execution["arguments"]["to"] == "bea"
    assert isinstance(outcome, dict) and outcome["key"] == execution["arguments"]["key"], outcome
    assert again == outcome
    assert len(live.executions("gated", text=edited)) == 1
