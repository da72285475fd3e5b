"""Verifiers steer the loop; an unparseable one counts as a rejection."""

from __future__ import annotations

from keelgate.loop import (
    ActionOutcome,
    ActionStatus,
    CallableVerifier,
    GroundedAnswerVerifier,
    PlannedAction,
    StopConditions,
    StopReason,
    VerdictDecision,
    VerifyRequest,
)
from tests.conftest import answer


def order(status: ActionStatus) -> PlannedAction:
    return PlannedAction(
        action_id="1-1",
        iteration=1,
        tool="place_order",
        arguments={},
        idempotency_key="k",
        outcome=ActionOutcome(status=status),
    )


def test_grounded_figures_pass_when_they_appear_in_observations():
    """101.5 in the answer is fine when a tool returned it; 3 is a small whole number."""
    v = GroundedAnswerVerifier()
    req = VerifyRequest(
        goal="buy 10 ACME", answer="Bought 10 ACME at $101.50 in 3 fills.", observations=['{"price":101.5}']
    )
    assert v.verify(req).decision is VerdictDecision.ACCEPT


def test_a_fabricated_figure_is_rejected():
    """A price that no tool returned is flagged ungrounded_figure."""
    v = GroundedAnswerVerifier()
    req = VerifyRequest(goal="buy 10 ACME", answer="Bought at 99.75", observations=['{"price":101.5}'])
    verdict = v.verify(req)
    assert verdict.decision is VerdictDecision.REJECT and "ungrounded_figure" in verdict.flags


def test_a_claimed_write_that_did_not_complete_is_rejected():
    """'Bought' with the order denied is an unsupported claim; saying it was not bought is honest."""
    v = GroundedAnswerVerifier(write_tools=["place_order"])
    denied = [order(ActionStatus.DENIED)]
    assert (
        v.verify(VerifyRequest(goal="g", answer="I bought it.", actions=denied)).decision
        is VerdictDecision.REJECT
    )
    assert (
        v.verify(
            VerifyRequest(goal="g", answer="I did not buy it; the order was not placed.", actions=denied)
        ).decision
        is VerdictDecision.ACCEPT
    )
    done = [order(ActionStatus.DONE)]
    assert (
        v.verify(VerifyRequest(goal="g", answer="Order placed.", actions=done)).decision
        is VerdictDecision.ACCEPT
    )


async def test_a_verifier_returning_garbage_counts_as_a_rejection(world):
    """An answer the loop cannot read is REJECT with the verifier_unparseable flag."""
    w = world([answer("a"), answer("b")])
    loop = w.loop(
        verifier=CallableVerifier(lambda req: {"maybe": True}), stop=StopConditions(max_verifier_rejections=1)
    )
    result = await w.start(loop)
    assert result.stop_reason is StopReason.VERIFIER_REJECTED
    assert result.state.verdicts[0].flags == ["verifier_unparseable"]


async def test_a_verifier_that_raises_counts_as_a_rejection(world):
    """An exception in the verifier is a rejection, not a crash."""

    def boom(req):
        raise ValueError("nope")

    w = world([answer("a")])
    result = await w.start(
        w.loop(verifier=CallableVerifier(boom), stop=StopConditions(max_verifier_rejections=1))
    )
    assert result.stop_reason is StopReason.VERIFIER_REJECTED


async def test_async_verifiers_and_decision_strings_are_understood(world):
    """CallableVerifier accepts async functions and decision names."""

    async def judge(req):
        return "accept"

    w = world([answer("a")])
    assert (await w.start(w.loop(verifier=CallableVerifier(judge)))).goal_reached
