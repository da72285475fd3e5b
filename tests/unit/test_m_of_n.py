"""M-of-N in the engine: ``RequireApproval(approvals=M)``, its older spelling, roles that count."""

from __future__ import annotations

import pytest

from keelgate.errors import ApproverRoleError, DuplicateApproverError
from keelgate.gateway import RequireApproval
from keelgate.loop import ActionStatus, StopReason
from tests.conftest import act, answer, buy


def test_approvals_and_its_older_spelling_mean_the_same_and_not_both():
    """approvals=3 and approvers=3 give one requirement; both at once, or a count below 1, is a ValueError."""
    new = RequireApproval(["place_order"], approvals=3)._requirement
    old = RequireApproval(["place_order"], approvers=3)._requirement
    assert new == old and new.approvers == 3
    assert RequireApproval(["place_order"])._requirement.approvers == 1
    with pytest.raises(ValueError, match="not both"):
        RequireApproval(["place_order"], approvals=2, approvers=2)
    for wrong in (0, -1, True):
        with pytest.raises(ValueError, match="at least 1"):
            RequireApproval(["place_order"], approvals=wrong)
    with pytest.raises(ValueError, match="role names"):
        RequireApproval(["place_order"], approver_roles=("admin", " "))
    assert RequireApproval(["x"], approver_roles="admin")._requirement.approver_roles == ("admin",)


async def test_three_of_n_runs_on_the_third_distinct_approval_only(world):
    """Two approvals leave it waiting; a repeat is refused; the third runs the order once."""
    w = world([act(buy()), answer("done")], policy=RequireApproval(["place_order"], approvals=3))
    loop = w.loop()
    await w.start(loop)
    state = loop.approve("t1", "run-1", "1-1", by="ann")
    assert state.action("1-1").approval.remaining == 2
    with pytest.raises(DuplicateApproverError):
        loop.approve("t1", "run-1", "1-1", by="ann")
    loop.approve("t1", "run-1", "1-1", by="bob")
    result = await w.start(w.loop())
    assert result.stop_reason is StopReason.APPROVAL_PENDING and w.ledger.count() == 0
    state = w.loop().approve("t1", "run-1", "1-1", by="cal")
    assert state.action("1-1").approval.remaining == 0
    assert state.action("1-1").status is ActionStatus.PENDING
    result = await w.start(w.loop())
    assert result.goal_reached and w.ledger.count() == 1


async def test_a_denial_by_any_one_ends_it_whatever_the_others_said(world):
    """Two of three approved; the third denies: denied, nothing runs."""
    w = world([act(buy()), answer("not bought")], policy=RequireApproval(["place_order"], approvals=3))
    loop = w.loop()
    await w.start(loop)
    loop.approve("t1", "run-1", "1-1", by="ann")
    loop.approve("t1", "run-1", "1-1", by="bob")
    loop.deny("t1", "run-1", "1-1", by="cal", note="no")
    result = await w.start(w.loop())
    assert result.state.action("1-1").status is ActionStatus.DENIED and w.ledger.count() == 0


async def test_only_deciders_holding_a_named_role_count(world):
    """approver_roles: a decider without one is refused (approve and deny alike), and nothing is recorded."""
    policy = RequireApproval(["place_order"], approvals=2, approver_roles=("admin", "treasury"))
    w = world([act(buy()), answer("done")], policy=policy)
    loop = w.loop()
    await w.start(loop)
    with pytest.raises(ApproverRoleError) as caught:
        loop.approve("t1", "run-1", "1-1", by="ann", roles=["viewer", "approver"])
    assert caught.value.detail == "admin, treasury" and caught.value.http_status == 403
    with pytest.raises(ApproverRoleError):
        loop.deny("t1", "run-1", "1-1", by="ann", note="no", roles=None)
    approval = w.checkpoints.load("t1", "run-1").action("1-1").approval
    assert approval.approvals == [] and approval.denied_by is None
    assert approval.approver_roles == ["admin", "treasury"]
    loop.approve("t1", "run-1", "1-1", by="bob", roles=["treasury"])
    loop.approve("t1", "run-1", "1-1", by="cal", roles=["approver", "admin"])
    result = await w.start(w.loop())
    assert result.goal_reached and w.ledger.count() == 1
