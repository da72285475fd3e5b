"""Edit, then approve: a new write-ahead action with its own key; the original never runs."""

from __future__ import annotations

import json

import pytest

from keelgate.canonical import canonical_sha256
from keelgate.errors import AlreadyDecidedError, ApprovalStaleError, DuplicateApproverError, EditInvalidError
from keelgate.gateway import RequireApproval
from keelgate.loop import ActionStatus, StopReason
from tests.conftest import act, answer, buy


def approvals(**kwargs):
    return RequireApproval(["place_order"], **kwargs)


async def waiting(world, **policy):
    w = world([act(buy(quantity=10)), answer("done")], policy=approvals(**policy))
    loop = w.loop()
    result = await w.start(loop)
    assert result.stop_reason is StopReason.APPROVAL_PENDING
    return w, loop


async def test_an_edited_approval_runs_the_edited_call_once_and_never_the_original(world):
    """buy 10 edited to buy 5: one order of 5 with a new key; the original ends denied "edited by"."""
    w, loop = await waiting(world)
    original = w.checkpoints.load("t1", "run-1").action("1-1")
    state = loop.approve(
        "t1", "run-1", "1-1", by="alice", note="5 is enough", arguments={**original.arguments, "quantity": 5}
    )
    first, edited = state.actions
    assert (
        first.status is ActionStatus.DENIED and first.outcome.detail == "edited by alice: 1-1.e1 replaces it"
    )
    assert edited.action_id == "1-1.e1" and edited.arguments["quantity"] == 5
    assert edited.idempotency_key != first.idempotency_key
    assert edited.approval.edit_of == "1-1" and first.approval.replaced_by == "1-1.e1"
    result = await w.start(w.loop())
    assert result.goal_reached
    assert w.ledger.count() == 1 and w.ledger.count(edited.idempotency_key) == 1
    assert w.ledger.count(first.idempotency_key) == 0
    # The planner saw both: the original denied as edited, and the edited call done.
    entries = [json.loads(m.content) for m in w.planner.requests[-1].messages if m.role == "tool"]
    assert [(e["action_id"], e["status"]) for e in entries] == [("1-1", "denied"), ("1-1.e1", "done")]
    assert "edited by alice" in entries[0]["detail"]


async def test_the_edit_is_audited_with_hashes_and_changed_field_names_not_values(world):
    """approval.edited: who, both argument hashes, the changed field names; never the arguments."""
    w, loop = await waiting(world)
    original = w.checkpoints.load("t1", "run-1").action("1-1")
    edited_args = {**original.arguments, "quantity": 5}
    loop.approve("t1", "run-1", "1-1", by="alice", arguments=edited_args)
    event = next(e for e in w.audit.events("t1") if e.kind == "approval.edited")
    assert event.actor == "alice" and event.body["changed"] == ["quantity"]
    assert event.body["original_hash"] == canonical_sha256(original.arguments)
    assert event.body["new_action_id"] == "1-1.e1"
    assert "ACME" not in json.dumps(event.body)


async def test_an_edit_that_changes_nothing_is_a_plain_approval(world):
    """The same arguments (in another order) approve the original; no second action appears."""
    w, loop = await waiting(world)
    original = w.checkpoints.load("t1", "run-1").action("1-1")
    state = loop.approve(
        "t1", "run-1", "1-1", by="alice", arguments=dict(reversed(list(original.arguments.items())))
    )
    assert len(state.actions) == 1 and state.actions[0].approval.granted
    assert not [e for e in w.audit.events("t1") if e.kind == "approval.edited"]


@pytest.mark.parametrize(
    "change",
    [{"quantity": 0}, {"quantity": "5"}, {"side": "steal"}, {"symbol": None}, {"extra": 1}],
    ids=["zero", "text", "bad_side", "null", "extra"],
)
async def test_edited_arguments_that_fail_the_tool_schema_change_nothing(world, change):
    """EditInvalidError naming the field; the approval still waits, nothing is audited as edited."""
    w, loop = await waiting(world)
    original = w.checkpoints.load("t1", "run-1").action("1-1")
    with pytest.raises(EditInvalidError) as caught:
        loop.approve("t1", "run-1", "1-1", by="alice", arguments={**original.arguments, **change})
    assert next(iter(change)) in caught.value.detail
    state = w.checkpoints.load("t1", "run-1")
    assert len(state.actions) == 1 and state.action("1-1").status is ActionStatus.AWAITING_APPROVAL
    assert not [e for e in w.audit.events("t1") if e.kind == "approval.edited"]


async def test_under_four_eyes_the_editor_counts_once_and_a_second_person_approves_the_edit(world):
    """With two approvers the edited call waits for a second person; the editor cannot vote twice."""
    w, loop = await waiting(world, approvers=2)
    original = w.checkpoints.load("t1", "run-1").action("1-1")
    loop.approve("t1", "run-1", "1-1", by="alice", arguments={**original.arguments, "quantity": 5})
    result = await w.start(w.loop())
    assert result.stop_reason is StopReason.APPROVAL_PENDING and w.ledger.count() == 0
    loop = w.loop()
    with pytest.raises(DuplicateApproverError):
        loop.approve("t1", "run-1", "1-1.e1", by="alice")
    loop.approve("t1", "run-1", "1-1.e1", by="bob")
    result = await w.start(w.loop())
    assert result.goal_reached and w.ledger.count() == 1


async def test_an_approval_is_bound_to_the_arguments_the_approver_saw(world):
    """A page that showed other arguments is ApprovalStaleError; after an edit the original is decided."""
    w, loop = await waiting(world)
    original = w.checkpoints.load("t1", "run-1").action("1-1")
    with pytest.raises(ApprovalStaleError):
        loop.approve(
            "t1", "run-1", "1-1", by="bob", seen=canonical_sha256({**original.arguments, "quantity": 9})
        )
    loop.approve("t1", "run-1", "1-1", by="alice", arguments={**original.arguments, "quantity": 5})
    with pytest.raises(AlreadyDecidedError) as caught:  # bob's stale page approving the original
        loop.approve("t1", "run-1", "1-1", by="bob", seen=canonical_sha256(original.arguments))
    assert caught.value.detail == "alice"
    state = w.checkpoints.load("t1", "run-1")
    assert state.action("1-1.e1").approval.approvals[0].by == "alice"  # bob's vote went nowhere


async def test_an_approval_recorded_for_other_arguments_never_runs_them(world):
    """A checkpoint whose arguments changed after approval (tampering) is refused by the gateway."""
    w, loop = await waiting(world)
    state = loop.approve("t1", "run-1", "1-1", by="alice")
    tampered = state.model_copy(deep=True)
    tampered.seq += 1
    tampered.action("1-1").arguments["quantity"] = 9_999
    w.checkpoints.save(tampered)
    result = await w.start(w.loop())
    order = result.state.action("1-1")
    assert order.status is ActionStatus.DENIED and order.outcome.code == "approval_invalid"
    assert w.ledger.count() == 0
