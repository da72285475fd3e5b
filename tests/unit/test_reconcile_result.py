"""After a reconcile the planner sees the truth: executed with the recorded result, without one, or not."""

from __future__ import annotations

import json

import pytest

from keelgate.errors import InvalidResultError
from keelgate.loop import ActionStatus, GroundedAnswerVerifier, VerdictDecision, VerifyRequest
from tests.conftest import act, answer, buy
from tests.unit.test_loop_decisions import LedgerConfirmer, _unknown_run


def order_message(w) -> dict:
    """The order's entry in the context of the planner's latest request."""
    for message in reversed(w.planner.requests[-1].messages):
        if message.role == "tool":
            entry = json.loads(message.content)
            if entry["action_id"] == "1-1":
                return entry
    raise AssertionError("the planner was not told about the order")


async def test_a_recorded_result_reaches_the_planner_as_the_calls_untrusted_output(world):
    """executed with {"order_id": ...}: done, settled by the person, their record is the output."""
    w = world([act(buy()), answer("done")])
    loop, _ = await _unknown_run(w)
    record = {"order_id": "PB-000001", "price": 101.5}
    state = await loop.reconcile("t1", "run-1", "1-1", executed=True, by="bob", note="seen", result=record)
    assert json.loads(state.action("1-1").outcome.output) == record
    await w.start(w.loop())
    entry = order_message(w)
    assert entry["status"] == "done" and entry["settled_by"] == "bob"
    assert json.loads(entry["output"]) == record
    assert "output is the recorded result" in entry["settlement"]
    message = next(m for m in w.planner.requests[-1].messages if m.role == "tool")
    assert message.untrusted


async def test_without_a_result_the_planner_is_told_it_was_not_recorded(world):
    """executed, no result: never a bare "done without output" the planner could read as not placed."""
    w = world([act(buy()), answer("done")])
    loop, _ = await _unknown_run(w)
    await loop.reconcile("t1", "run-1", "1-1", executed=True, by="bob", note="seen")
    await w.start(w.loop())
    entry = order_message(w)
    assert entry["status"] == "done" and entry["output"] is None
    assert "executed" in entry["settlement"] and "result not recorded" in entry["settlement"]


async def test_an_abandoned_call_is_reported_as_not_executed(world):
    """executed=False: the planner reads that it did not happen and will not be retried."""
    w = world([act(buy()), answer("done")])
    loop, _ = await _unknown_run(w)
    await loop.reconcile("t1", "run-1", "1-1", executed=False, by="bob", note="not at the broker")
    await w.start(w.loop())
    entry = order_message(w)
    assert entry["status"] == "abandoned" and entry["settlement"].startswith("not executed")


@pytest.mark.parametrize(
    ("executed", "result"),
    [
        (True, ["not", "an", "object"]),
        (True, "PB-000001"),
        (True, {"price": float("nan")}),
        (True, {"blob": "x" * 20_000}),
        (False, {"order_id": "PB-000001"}),
    ],
    ids=["list", "string", "nan", "too_large", "not_executed"],
)
async def test_a_result_that_is_not_a_bounded_json_object_is_refused_and_changes_nothing(
    world, executed, result
):
    """InvalidResultError; the action is still unknown and nothing was audited."""
    w = world([act(buy()), answer("done")])
    loop, _ = await _unknown_run(w)
    with pytest.raises(InvalidResultError):
        await loop.reconcile("t1", "run-1", "1-1", executed=executed, by="bob", result=result)
    assert w.checkpoints.load("t1", "run-1").action("1-1").status is ActionStatus.UNKNOWN
    assert not [e for e in w.audit.events("t1") if e.kind == "loop.reconciled"]


async def test_the_reconciled_event_carries_the_note_and_whether_a_result_was_recorded(world):
    """loop.reconciled: note and result_recorded, still never the arguments or the result itself."""
    w = world([act(buy()), answer("done")])
    loop, _ = await _unknown_run(w)
    await loop.reconcile(
        "t1", "run-1", "1-1", executed=True, by="bob", note="found it", result={"order_id": "PB-7"}
    )
    event = next(e for e in w.audit.events("t1") if e.kind == "loop.reconciled")
    assert event.body["note"] == "found it" and event.body["result_recorded"] is True
    assert "PB-7" not in json.dumps(event.body) and "ACME" not in json.dumps(event.body)


class RecordConfirmer(LedgerConfirmer):
    """Answers with the downstream record instead of a bare True."""

    def confirm(self, action, *, tenant_id, run_id):
        return {"order_id": "PB-000042", "found_by": "ledger"} if self.ledger.count() else None


async def test_a_confirmer_may_return_the_downstream_record_as_the_result(world):
    """A mapping from the confirmer is a definite yes, and its record becomes the call's output."""
    w = world([act(buy()), answer("done")])
    await _unknown_run(w)
    loop = w.loop()
    loop.confirmer = RecordConfirmer(w.ledger)
    result = await w.start(loop)
    order = result.state.action("1-1")
    assert order.status is ActionStatus.DONE and json.loads(order.outcome.output)["order_id"] == "PB-000042"
    event = next(e for e in w.audit.events("t1") if e.kind == "loop.reconciled")
    assert event.body["source"] == "confirmer" and event.body["result_recorded"] is True
    assert w.ledger.count() == 1


def _verify(answer_text: str, done: bool) -> VerdictDecision:
    from keelgate.loop import ActionOutcome, PlannedAction

    action = PlannedAction(
        action_id="1-1",
        iteration=1,
        tool="place_order",
        arguments={"symbol": "ACME"},
        side_effect="write",
        idempotency_key="k",
        outcome=ActionOutcome(status=ActionStatus.DONE if done else ActionStatus.ABANDONED),
    )
    verifier = GroundedAnswerVerifier(write_tools=["place_order"])
    request = VerifyRequest(goal="buy 10 ACME", answer=answer_text, actions=(action,))
    return verifier.verify(request).decision


@pytest.mark.parametrize(
    ("text", "done", "decision"),
    [
        ("The order to buy 10 ACME was not placed.", True, VerdictDecision.REJECT),
        ("Nothing was executed.", True, VerdictDecision.REJECT),
        ("Nothing was executed.", False, VerdictDecision.ACCEPT),
        ("The order was never executed.", True, VerdictDecision.REJECT),
        ("The order to buy 10 ACME was not placed.", False, VerdictDecision.ACCEPT),
        ("Bought 10 ACME; no further orders.", True, VerdictDecision.ACCEPT),
        ("Bought 10 ACME.", False, VerdictDecision.REJECT),
    ],
)
def test_honest_claims_catch_the_opposite_lie_too(text, done, decision):
    """Saying a completed write was not placed is refused like claiming one that never ran."""
    assert _verify(text, done) is decision
