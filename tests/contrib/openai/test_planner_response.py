"""What the planner makes of each kind of answer: actions, a final answer, or a PlannerError."""

from __future__ import annotations

import pytest

from keelgate.contrib.openai import UNPARSED_ARGUMENTS
from keelgate.errors import PlannerError
from keelgate.loop import ModelUsage
from tests.contrib.openai._helpers import plan_request, planner
from tests.contrib.openai._server import Reply, completion, error, tool_call


async def test_tool_calls_become_proposed_actions_with_their_usage(server):
    """Each function call is a ProposedAction with parsed arguments; usage is the response's."""
    server.reply(
        completion(
            tool_calls=[
                tool_call("get_quote", {"symbol": "ACME"}),
                tool_call("place_order", {"symbol": "ACME", "side": "buy", "quantity": 10}),
            ],
            usage=(120, 30),
            model="fake-model-2026",
        )
    )
    plan = await planner(server.url).plan(plan_request())
    assert plan.final_answer is None
    assert [(a.tool, dict(a.arguments)) for a in plan.actions] == [
        ("get_quote", {"symbol": "ACME"}),
        ("place_order", {"symbol": "ACME", "side": "buy", "quantity": 10}),
    ]
    assert plan.usage == ModelUsage(input_tokens=120, output_tokens=30, model="fake-model-2026")


async def test_plain_text_is_the_final_answer(server):
    """No tool call: the stripped text is the final answer and there are no actions."""
    server.reply(completion("  Bought 10 ACME at 101.5.\n"))
    plan = await planner(server.url).plan(plan_request())
    assert plan.final_answer == "Bought 10 ACME at 101.5." and plan.actions == ()


async def test_tool_calls_and_text_together_the_calls_win_and_the_text_is_their_rationale(server):
    """Never both in a Plan: the text becomes each action's rationale, not an answer."""
    server.reply(
        completion("I need the price first.", tool_calls=[tool_call("get_quote", {"symbol": "ACME"})])
    )
    plan = await planner(server.url).plan(plan_request())
    assert plan.final_answer is None
    assert [(a.tool, a.rationale) for a in plan.actions] == [("get_quote", "I need the price first.")]


async def test_an_unknown_tool_name_passes_through_for_the_gateway_to_refuse(server):
    """The planner does not filter tools: the gateway answers unknown_tool."""
    server.reply(completion(tool_calls=[tool_call("wire_money", {"to": "x"})]))
    plan = await planner(server.url).plan(plan_request())
    assert [(a.tool, dict(a.arguments)) for a in plan.actions] == [("wire_money", {"to": "x"})]


@pytest.mark.parametrize(
    "raw",
    [
        '{"symbol": "ACME", "side": "buy", "quantity": 10',  # cut off
        '["ACME", "buy", 10]',  # JSON, but not an object
        '"ACME"',
        '{"quantity": NaN}',  # not storable as canonical JSON
        '{"quantity": 1e400}',  # overflows to infinity
    ],
)
async def test_arguments_that_are_not_a_json_object_are_kept_unparsed_for_the_gateway(server, raw):
    """The raw text goes under UNPARSED_ARGUMENTS, a name no schema allows; nothing is guessed."""
    server.reply(completion(tool_calls=[tool_call("place_order", raw)]))
    plan = await planner(server.url).plan(plan_request())
    assert [(a.tool, dict(a.arguments)) for a in plan.actions] == [("place_order", {UNPARSED_ARGUMENTS: raw})]


async def test_empty_arguments_are_an_empty_object(server):
    """Some servers send "" for a call without arguments: that is {}."""
    server.reply(completion(tool_calls=[tool_call("get_quote", "")]))
    plan = await planner(server.url).plan(plan_request())
    assert dict(plan.actions[0].arguments) == {}


@pytest.mark.parametrize(
    ("reply", "detail"),
    [
        (completion(refusal="I can't help with trading."), "openai: the model refused"),
        (completion(None), "openai: empty response"),
        (completion("   "), "openai: empty response"),
        (completion("Bought 10 AC", finish_reason="length"), "openai: the answer hit the max-token cap"),
        (completion("x", finish_reason="content_filter"), "openai: the provider filtered the response"),
        ({**completion("x"), "choices": []}, "openai: empty response"),
    ],
)
async def test_a_reply_that_is_not_a_plan_is_a_planner_error_with_fixed_wording(server, reply, detail):
    """A refusal, an empty, truncated or filtered answer: PlannerError whose detail never quotes the model."""
    server.reply(reply)
    with pytest.raises(PlannerError) as caught:
        await planner(server.url).plan(plan_request())
    assert caught.value.detail == detail


@pytest.mark.parametrize(
    ("reply", "detail"),
    [
        (error(500), "openai: InternalServerError (HTTP 500)"),
        (error(429, "slow down", "rate_limit_error"), "openai: RateLimitError (HTTP 429)"),
        (error(401, "bad key", "invalid_request_error"), "openai: AuthenticationError (HTTP 401)"),
        (Reply(b"<html>502 Bad Gateway</html>"), "openai: malformed response"),
        (Reply(b"not json", content_type="text/plain"), "openai: malformed response"),
        (Reply({"unexpected": "shape"}), "openai: malformed response"),
        (Reply({"choices": [{"message": 5}]}), "openai: malformed response"),
    ],
)
async def test_error_statuses_and_garbage_bodies_are_planner_errors_naming_only_the_class(
    server, reply, detail
):
    """Status errors name their class and status, garbage is "malformed"; the body is never quoted."""
    server.reply(reply)
    with pytest.raises(PlannerError) as caught:
        await planner(server.url).plan(plan_request())
    assert caught.value.detail == detail
    assert len(server.requests) == 1  # no retry: a budget sees every paid call


async def test_a_slow_response_is_a_timeout_planner_error(server):
    """A reply slower than the client's timeout raises PlannerError "openai: APITimeoutError"."""
    server.reply(Reply(completion("late"), delay=5))
    with pytest.raises(PlannerError) as caught:
        await planner(server.url, timeout=0.2).plan(plan_request())
    assert caught.value.detail == "openai: APITimeoutError"


async def test_a_refused_connection_is_a_connection_planner_error():
    """Nobody listening: PlannerError "openai: APIConnectionError"."""
    with pytest.raises(PlannerError) as caught:
        await planner("http://127.0.0.1:9/v1").plan(plan_request())
    assert caught.value.detail == "openai: APIConnectionError"


async def test_retries_are_opt_in(server):
    """With max_retries=1 a 500 is retried once and the second answer is used."""
    server.reply(error(500), completion("done"))
    plan = await planner(server.url, max_retries=1).plan(plan_request())
    assert plan.final_answer == "done" and len(server.requests) == 2


async def test_a_server_that_reports_no_usage_is_charged_an_estimate(server):
    """Missing usage is never a free call: input is the prompt estimate, output the text's size."""
    server.reply(completion("x" * 400, usage=None))
    p = planner(server.url)
    plan = await p.plan(plan_request())
    assert plan.usage.input_tokens == p.estimate_tokens(plan_request()) > 0
    assert plan.usage.output_tokens == 101
    assert plan.usage.model == "fake-model"
