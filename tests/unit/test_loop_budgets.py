"""Stop conditions: every limit stops explicitly, and a budget stop resumes where it stopped."""

from __future__ import annotations

from keelgate.loop import ModelPrice, Phase, StopConditions, StopReason
from tests.conftest import act, answer, buy, quote

PRICES = {"m": ModelPrice(input_per_million=1_000_000.0, output_per_million=1_000_000.0)}
"""A dollar a token: budgets in whole dollars are easy to read."""


async def test_max_iterations_stops_and_a_larger_budget_continues(world):
    """Two plan steps allowed: the third is not asked for; resume with 5 finishes."""
    w = world([act(quote()), act(quote("BETA")), answer("done")])
    result = await w.start(w.loop(stop=StopConditions(max_iterations=2)))
    assert result.stop_reason is StopReason.MAX_ITERATIONS and result.resumable
    assert result.state.iteration == 2 and w.planner.calls == 2
    result = await w.loop().resume("t1", "run-1", stop=StopConditions(max_iterations=5))
    assert result.goal_reached
    assert w.planner.calls == 1  # the fresh planner answered only step 3


async def test_a_call_that_crosses_the_token_budget_is_accepted_but_not_acted_on(world):
    """The plan is saved pending; resume with more tokens runs it without re-planning."""
    w = world([act(buy(), tokens=(50, 80)), answer("done")])
    loop = w.loop(stop=StopConditions(max_tokens=100))
    result = await w.start(loop)
    assert result.stop_reason is StopReason.TOKEN_BUDGET and result.resumable
    assert result.state.phase is Phase.ACT
    assert result.state.usage.tokens == 130
    assert w.ledger.count() == 0
    loop = w.loop()
    result = await loop.resume("t1", "run-1", stop=StopConditions(max_tokens=10_000))
    assert result.goal_reached
    assert w.ledger.count() == 1
    assert w.planner.calls == 1  # only the final answer; the order came from the checkpoint


async def test_the_precall_estimate_refuses_a_call_whose_input_alone_crosses_the_budget(world):
    """With a tiny token budget no model call is made, and the step is not counted."""
    w = world([answer("done")], input_estimate=None)
    result = await w.start(w.loop(stop=StopConditions(max_tokens=5)))
    assert result.stop_reason is StopReason.TOKEN_BUDGET
    assert w.planner.calls == 0 and result.state.iteration == 0
    result = await w.loop().resume("t1", "run-1", stop=StopConditions(max_tokens=100_000))
    assert result.goal_reached and result.state.iteration == 1


async def test_a_dollar_budget_with_an_unpriced_model_stops_with_cost_unknown(world):
    """No price for the model: stop before calling rather than spend unmetered."""
    w = world([answer("done")])
    result = await w.start(w.loop(stop=StopConditions(max_dollars=1.0), price_model="unpriced"))
    assert result.stop_reason is StopReason.COST_UNKNOWN
    assert w.planner.calls == 0


async def test_a_plan_from_an_unpriced_model_under_a_dollar_budget_stops_after_saving(world):
    """The model reports a model name with no price: the plan is kept, nothing runs."""
    w = world([act(buy(), tokens=(1, 1), model="mystery"), answer("done")])
    loop = w.loop(stop=StopConditions(max_dollars=1e9), pricing=PRICES, price_model="m")
    result = await w.start(loop)
    assert result.stop_reason is StopReason.COST_UNKNOWN
    assert result.state.phase is Phase.ACT and w.ledger.count() == 0


async def test_dollars_are_counted_from_the_pricing_table_and_stop_when_crossed(world):
    """At a dollar a token, a 30-token call crosses a 20 dollar budget and is not acted on."""
    w = world([act(buy(), tokens=(10, 20), model="m"), answer("done")])
    loop = w.loop(stop=StopConditions(max_dollars=20.0), pricing=PRICES, price_model="m")
    result = await w.start(loop)
    assert result.stop_reason is StopReason.DOLLAR_BUDGET
    assert result.state.usage.dollars == 30.0
    assert w.ledger.count() == 0


async def test_keelgate_ships_no_default_prices(world):
    """Without a pricing table even a well-known model is unpriced: a dollar budget stops."""
    w = world([answer("done")])
    result = await w.start(w.loop(stop=StopConditions(max_dollars=1e9), price_model="gpt-4o"))
    assert result.stop_reason is StopReason.COST_UNKNOWN
    assert w.planner.calls == 0


async def test_timeout_counts_active_time_only(world):
    """Hours stopped waiting for a human do not use the timeout; active seconds do."""
    from keelgate.gateway import RequireApproval

    w = world([act(buy()), answer("done")], policy=RequireApproval(["place_order"]))
    loop = w.loop(stop=StopConditions(timeout=60))
    result = await w.start(loop)
    assert result.stop_reason is StopReason.APPROVAL_PENDING
    w.clock.advance(10 * 3600)  # a long wait for a person
    loop.approve("t1", "run-1", "1-1", by="alice")
    result = await w.start(w.loop())
    assert result.goal_reached
    assert result.state.usage.active_seconds < 60


async def test_timeout_stops_a_run_that_is_busy_too_long(world):
    """A tool that takes 100 active seconds trips a 60 second timeout at the next boundary."""
    w = world([act(quote()), answer("done")])
    loop = w.loop(stop=StopConditions(timeout=60))
    original = loop.gateway.execute

    async def slow(ctx, action):
        w.clock.advance(100)
        return await original(ctx, action)

    loop.gateway.execute = slow  # type: ignore[method-assign]
    result = await w.start(loop)
    assert result.stop_reason is StopReason.TIMEOUT and result.resumable
    result = await w.loop().resume("t1", "run-1", stop=StopConditions(timeout=1000))
    assert result.goal_reached


async def test_the_goal_predicate_is_checked_after_each_observation(world):
    """A goal met by the first observation ends the run before any further planning."""
    w = world([act(buy()), act(buy("BETA")), answer("done")])
    goal = StopConditions(max_iterations=10, goal=lambda s: any(a.tool == "place_order" for a in s.actions))
    result = await w.start(w.loop(stop=goal))
    assert result.stop_reason is StopReason.GOAL_REACHED
    assert w.planner.calls == 1 and w.ledger.count() == 1


async def test_the_verifier_rejection_limit_stops_the_run(world):
    """Every non-ACCEPT verdict counts; at the limit the run stops, resumable with more."""
    from keelgate.loop import CallableVerifier

    w = world([answer("a"), answer("b"), answer("c")])
    verifier = CallableVerifier(lambda req: req.answer == "c")
    result = await w.start(w.loop(verifier=verifier, stop=StopConditions(max_verifier_rejections=2)))
    assert result.stop_reason is StopReason.VERIFIER_REJECTED and result.resumable
    assert result.state.verifier_rejections == 2
    result = await w.loop(verifier=verifier).resume(
        "t1", "run-1", stop=StopConditions(max_verifier_rejections=5)
    )
    assert result.goal_reached and result.final_answer == "c"


async def test_the_precall_estimate_refuses_a_call_that_would_cross_the_dollar_budget(world):
    """A 100-token prompt at a dollar a token is not sent under a 50 dollar budget."""
    w = world([answer("done")], input_estimate=100)
    loop = w.loop(stop=StopConditions(max_dollars=50.0), pricing=PRICES, price_model="m")
    result = await w.start(loop)
    assert result.stop_reason is StopReason.DOLLAR_BUDGET
    assert w.planner.calls == 0 and result.state.iteration == 0
