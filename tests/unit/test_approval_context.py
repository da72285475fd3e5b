"""What an approval request carries for the person: the tool's impact line and the policy's risk mark."""

from __future__ import annotations

import json

from keelgate.gateway import Gateway, Grants, RequireApproval, SideEffect, Tool
from keelgate.loop import Loop
from keelgate.testing import TradeOrder, trading_tools
from tests.conftest import act, answer, buy, quote


def loop_with(w, *, describe, high_impact=None):
    base = w.loop()
    tools = {t.name: t for t in trading_tools(w.ledger)}
    order = tools["place_order"]
    tools["place_order"] = Tool(order.name, SideEffect.WRITE, TradeOrder, order.fn, describe=describe)
    gateway = Gateway(
        list(tools.values()),
        grants=Grants({"trader": ["*"]}),
        idempotency=w.keys,
        audit=w.audit,
        clock=w.clock,
        policy=RequireApproval(["place_order"], high_impact=high_impact),
    )
    return Loop(planner=w.planner, gateway=gateway, checkpoints=base.checkpoints, clock=w.clock)


async def test_the_impact_line_is_built_from_this_steps_observations(world):
    """describe(arguments, observations) sees the quote read just before; the request keeps its line."""
    w = world([act(quote(), buy(quantity=4)), answer("done")])

    def describe(args, observations):
        price = json.loads(observations[0])["price"]
        return f"{args.side} {args.quantity} {args.symbol} ≈ {args.quantity * price:.2f}"

    result = await w.start(loop_with(w, describe=describe, high_impact=lambda a: a.quantity > 3))
    approval = result.state.action("1-2").approval
    assert approval.impact == "buy 4 ACME ≈ 406.00" and approval.high_impact is True


async def test_a_describe_hook_that_raises_leaves_no_line_and_the_request_stands(world):
    """A failing display hook never blocks the approval request (nor marks it high impact)."""
    w = world([act(buy()), answer("done")])

    def broken(args, observations):
        raise RuntimeError("no quote")

    result = await w.start(loop_with(w, describe=broken))
    approval = result.state.action("1-1").approval
    assert approval is not None and approval.impact == "" and approval.high_impact is False
    assert result.state.action("1-1").status.value == "awaiting_approval"
