"""Expiry per policy: deny (the default, fail closed), escalate once, and warn before each deadline."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from keelgate.checkpoint import InMemoryCheckpointStore, SqliteCheckpointStore
from keelgate.errors import ApprovalEscalatedError, ApprovalExpiredError
from keelgate.gateway import ApprovalRules, RequireApproval
from keelgate.loop import ActionStatus, ApprovalState, Failpoints, LoopState, StopReason
from tests.conftest import act, answer, buy, quote

HOUR = 3600
ADMIN = {"viewer", "approver", "reconciler", "admin"}
"""What an admin holds: every role theirs includes (the host ranks roles, not the engine)."""
APPROVER = {"viewer", "approver"}


def escalating(**kwargs):
    """Orders wait 1 h, then go to an admin for 30 min; warned 10 min before each deadline."""
    settings = {
        "expires_after": timedelta(hours=1),
        "on_expiry": "escalate",
        "escalate_to": "admin",
        "escalate_after": timedelta(minutes=30),
        "warn_before": timedelta(minutes=10),
    }
    return RequireApproval(["place_order"], **(settings | kwargs))


async def waiting(world, policy):
    w = world([act(buy()), answer("done")], policy=policy)
    loop = w.loop()
    result = await w.start(loop)
    assert result.stop_reason is StopReason.APPROVAL_PENDING
    return w, loop


def kinds(w, *wanted):
    return [e for e in w.audit.events("t1") if e.kind in wanted]


def approval_of(w, action_id="1-1") -> ApprovalState:
    state = w.checkpoints.load("t1", "run-1")
    approval = state.action(action_id).approval
    assert approval is not None
    return approval


# -- deny stays the default ------------------------------------------------------------


async def test_without_on_expiry_a_deadline_denies_the_call_as_before(world):
    """The default: expire() denies (approval.expired), nothing escalates, the order never runs."""
    w, loop = await waiting(world, RequireApproval(["place_order"], expires_after=timedelta(hours=1)))
    assert approval_of(w).on_expiry == "deny" and approval_of(w).escalates_to is None
    assert loop.expire("t1", "run-1", "1-1") is None  # not yet due
    w.clock.advance(HOUR)
    assert loop.expire("t1", "run-1", "1-1") == "expired"
    assert loop.expire("t1", "run-1", "1-1") is None  # decided: nothing more to do
    assert [e.kind for e in kinds(w, "approval.expired", "approval.escalated")] == ["approval.expired"]
    result = await w.start(w.loop())
    assert result.goal_reached and w.ledger.count() == 0
    assert result.state.action("1-1").outcome.code == "approval_expired"


# -- escalate, then deny ---------------------------------------------------------------


async def test_the_first_deadline_escalates_to_the_role_and_the_second_denies(world):
    """At 1 h: escalated to admin until +30 min (audited by expiry); at the new deadline: denied."""
    w, loop = await waiting(world, escalating())
    requested = approval_of(w).requested_at
    w.clock.advance(HOUR + 5)
    assert loop.expire("t1", "run-1", "1-1") == "escalated"
    approval = approval_of(w)
    assert approval.escalated_to == "admin" and approval.escalated_at == w.clock.now()
    assert approval.expires_at == w.clock.now() + timedelta(minutes=30)
    assert approval.escalates_to is None  # once: the next deadline denies
    assert w.checkpoints.load("t1", "run-1").action("1-1").status is ActionStatus.AWAITING_APPROVAL
    (event,) = kinds(w, "approval.escalated")
    assert event.actor == "expiry"
    assert event.body == {
        "run_id": "run-1",
        "action_id": "1-1",
        "tool": "place_order",
        "escalated_to": "admin",
        "expires_at": approval.expires_at.isoformat(),
        "previous_expires_at": (requested + timedelta(hours=1)).isoformat(),
    }
    assert loop.expire("t1", "run-1", "1-1") is None  # the new deadline is not due yet
    w.clock.advance(30 * 60)
    assert loop.expire("t1", "run-1", "1-1") == "expired"
    assert len(kinds(w, "approval.escalated")) == 1 and len(kinds(w, "approval.expired")) == 1
    result = await w.start(w.loop())
    assert result.goal_reached and w.ledger.count() == 0
    assert result.state.action("1-1").outcome.code == "approval_expired"


async def test_after_escalation_only_the_escalation_role_decides(world):
    """An approver (or a caller naming no roles) is refused, naming the role; an admin's approval runs it."""
    w, loop = await waiting(world, escalating())
    w.clock.advance(HOUR)
    loop.expire("t1", "run-1", "1-1")
    for roles in (None, APPROVER):
        with pytest.raises(ApprovalEscalatedError) as refused:
            loop.approve("t1", "run-1", "1-1", by="bob", roles=roles)
        assert refused.value.detail == "admin"
        with pytest.raises(ApprovalEscalatedError):
            loop.deny("t1", "run-1", "1-1", by="bob", note="no", roles=roles)
    assert approval_of(w).approvals == [] and approval_of(w).denied_by is None
    loop.approve("t1", "run-1", "1-1", by="ada", roles=ADMIN)
    result = await w.start(w.loop())
    assert result.goal_reached and w.ledger.count() == 1


async def test_an_escalation_role_may_deny(world):
    """An admin's denial of an escalated call is a plain denial the planner reads."""
    w, loop = await waiting(world, escalating())
    w.clock.advance(HOUR)
    loop.expire("t1", "run-1", "1-1")
    loop.deny("t1", "run-1", "1-1", by="ada", note="not this week", roles=ADMIN)
    result = await w.start(w.loop())
    assert result.goal_reached and w.ledger.count() == 0
    assert result.state.action("1-1").outcome.detail == "not this week"


async def test_a_decision_after_the_deadline_escalates_first_and_is_refused_below_the_role(world):
    """Nobody swept yet: bob's late approval escalates the call (saved, audited) and is refused."""
    w, loop = await waiting(world, escalating())
    w.clock.advance(HOUR + 1)
    with pytest.raises(ApprovalEscalatedError):
        loop.approve("t1", "run-1", "1-1", by="bob", roles=APPROVER)
    assert approval_of(w).escalated_to == "admin" and approval_of(w).approvals == []
    assert len(kinds(w, "approval.escalated")) == 1
    state = w.loop().approve("t1", "run-1", "1-1", by="ada", roles=ADMIN)  # an admin's late approval counts
    assert state.action("1-1").status is ActionStatus.PENDING
    assert len(kinds(w, "approval.escalated")) == 1


async def test_a_late_decision_on_a_call_that_denies_at_expiry_is_still_expired(world):
    """Without escalation a late approval raises ApprovalExpiredError, whatever the roles."""
    w, loop = await waiting(world, RequireApproval(["place_order"], expires_after=timedelta(hours=1)))
    w.clock.advance(HOUR)
    with pytest.raises(ApprovalExpiredError):
        loop.approve("t1", "run-1", "1-1", by="ada", roles=ADMIN)
    assert approval_of(w).expired


async def test_a_resume_after_the_deadline_escalates_instead_of_denying(world):
    """Nobody swept: the resume escalates (still waiting, nothing ran); the next deadline's resume denies."""
    w, _ = await waiting(world, escalating())
    w.clock.advance(HOUR)
    result = await w.start(w.loop())
    assert result.stop_reason is StopReason.APPROVAL_PENDING
    assert result.state.action("1-1").approval.escalated_to == "admin"
    assert len(kinds(w, "approval.escalated")) == 1 and not kinds(w, "approval.expired")
    result = await w.start(w.loop())  # nothing due: no second escalation
    assert len(kinds(w, "approval.escalated")) == 1
    w.clock.advance(30 * 60)
    result = await w.start(w.loop())
    assert result.goal_reached and w.ledger.count() == 0
    assert result.state.action("1-1").outcome.code == "approval_expired"


async def test_votes_given_before_the_escalation_still_count(world):
    """Four-eyes: bob approved in time; after escalation one admin completes it (two distinct people)."""
    w, loop = await waiting(world, escalating(approvers=2))
    loop.approve("t1", "run-1", "1-1", by="bob", roles=APPROVER)
    w.clock.advance(HOUR)
    assert loop.expire("t1", "run-1", "1-1") == "escalated"
    with pytest.raises(ApprovalEscalatedError):
        loop.approve("t1", "run-1", "1-1", by="carol", roles=APPROVER)
    loop.approve("t1", "run-1", "1-1", by="ada", roles=ADMIN)
    result = await w.start(w.loop())
    assert result.goal_reached and w.ledger.count() == 1


async def test_an_edit_of_an_escalated_call_stays_escalated(world):
    """An admin's edit: the edited call keeps the role and the deadline, so an approver cannot finish it."""
    w, loop = await waiting(world, escalating(approvers=2))
    w.clock.advance(HOUR)
    loop.expire("t1", "run-1", "1-1")
    deadline = approval_of(w).expires_at
    edited = {"symbol": "ACME", "side": "buy", "quantity": 5}
    state = loop.approve("t1", "run-1", "1-1", by="ada", roles=ADMIN, arguments=edited)
    replacement = state.action("1-1.e1").approval
    assert replacement.escalated_to == "admin" and replacement.expires_at == deadline
    with pytest.raises(ApprovalEscalatedError):
        loop.approve("t1", "run-1", "1-1.e1", by="bob", roles=APPROVER)
    w.clock.advance(30 * 60)
    assert loop.expire("t1", "run-1", "1-1.e1") == "expired"  # escalated already: its deadline denies
    result = await w.start(w.loop())
    assert w.ledger.count() == 0 and result.state.action("1-1.e1").outcome.code == "approval_expired"


# -- warnings ----------------------------------------------------------------------------


async def test_a_warning_is_given_once_per_deadline_in_its_window(world):
    """Not before 50 min, once inside the window (a fresh loop too), again before the escalated deadline."""
    w, loop = await waiting(world, escalating())
    first_deadline = approval_of(w).expires_at
    w.clock.advance(49 * 60)
    assert loop.warn_expiring("t1", "run-1", "1-1") is False
    w.clock.advance(60)
    assert loop.warn_expiring("t1", "run-1", "1-1") is True
    assert loop.warn_expiring("t1", "run-1", "1-1") is False
    assert w.loop().warn_expiring("t1", "run-1", "1-1") is False  # after a restart, too
    (warning,) = kinds(w, "approval.expiring")
    assert warning.actor == "expiry"
    assert warning.body == {
        "run_id": "run-1",
        "action_id": "1-1",
        "tool": "place_order",
        "expires_at": first_deadline.isoformat(),
        "escalates_to": "admin",
    }
    assert approval_of(w).warned_for == first_deadline and approval_of(w).warned_at == w.clock.now()

    w.clock.advance(10 * 60)
    loop = w.loop()
    assert loop.warn_expiring("t1", "run-1", "1-1") is False  # the deadline passed: expiry's turn
    assert loop.expire("t1", "run-1", "1-1") == "escalated"
    w.clock.advance(20 * 60)
    assert loop.warn_expiring("t1", "run-1", "1-1") is True
    assert loop.warn_expiring("t1", "run-1", "1-1") is False
    second = kinds(w, "approval.expiring")[1]
    assert second.body["expires_at"] == approval_of(w).expires_at.isoformat()
    assert "escalates_to" not in second.body  # this deadline denies
    assert len(kinds(w, "approval.expiring")) == 2


async def test_no_warning_without_warn_before(world):
    """A policy without warn_before never warns, however close the deadline."""
    w, loop = await waiting(world, RequireApproval(["place_order"], expires_after=timedelta(hours=1)))
    w.clock.advance(59 * 60)
    assert loop.warn_expiring("t1", "run-1", "1-1") is False
    assert not kinds(w, "approval.expiring")


async def test_no_warning_for_a_decided_call(world):
    """An approved call is not warned of: nothing waits."""
    w, loop = await waiting(world, escalating())
    loop.approve("t1", "run-1", "1-1", by="bob")
    w.clock.advance(55 * 60)
    assert loop.warn_expiring("t1", "run-1", "1-1") is False
    assert not kinds(w, "approval.expiring")


# -- durability --------------------------------------------------------------------------


def _state_with(approval: ApprovalState) -> LoopState:
    from keelgate.loop import PlannedAction

    return LoopState(
        tenant_id="t1",
        run_id="r",
        agent_id="a",
        goal="g",
        as_of=datetime(2026, 1, 1, tzinfo=UTC),
        trace_id="tr",
        seq=1,
        actions=[
            PlannedAction(
                action_id="1-1",
                iteration=1,
                tool="place_order",
                arguments={},
                idempotency_key="k",
                approval=approval,
            )
        ],
    )


@pytest.mark.parametrize("store", ["json", "memory", "sqlite"])
def test_the_expiry_settings_and_what_happened_survive_a_save_and_load(tmp_path, store):
    """on_expiry, the role, both lengths, the escalation and the warning round-trip every store."""
    at = datetime(2026, 1, 1, 9, tzinfo=UTC)
    approval = ApprovalState(
        requested_at=at,
        expires_at=at + timedelta(hours=1),
        on_expiry="escalate",
        escalate_to="admin",
        escalate_after=timedelta(minutes=30),
        warn_before=timedelta(minutes=10),
        escalated_to="admin",
        escalated_at=at + timedelta(minutes=31),
        warned_at=at + timedelta(minutes=50),
        warned_for=at + timedelta(hours=1),
    )
    state = _state_with(approval)
    if store == "json":
        loaded = LoopState.from_json(state.to_json())
    else:
        checkpoints = (
            InMemoryCheckpointStore() if store == "memory" else SqliteCheckpointStore(tmp_path / "c")
        )
        checkpoints.save(state)
        loaded = checkpoints.load("t1", "r")
    assert loaded.action("1-1").approval == approval
    assert loaded.action("1-1").approval.warn_at == at + timedelta(minutes=50)


def test_a_checkpoint_from_before_expiry_settings_loads_as_deny():
    """An older checkpoint without the new fields reads as on_expiry deny, never warned."""
    state = _state_with(ApprovalState(requested_at=datetime(2026, 1, 1, tzinfo=UTC)))
    old = state.model_dump(mode="json")
    for key in (
        "on_expiry",
        "escalate_to",
        "escalate_after",
        "warn_before",
        "escalated_to",
        "escalated_at",
        "warned_at",
        "warned_for",
    ):
        del old["actions"][0]["approval"][key]
    loaded = LoopState.model_validate(old).action("1-1").approval
    assert loaded.on_expiry == "deny" and loaded.escalates_to is None and loaded.warn_at is None


# -- the policy --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"on_expiry": "ignore", "expires_after": timedelta(hours=1)},
        {"on_expiry": "escalate", "expires_after": timedelta(hours=1), "escalate_to": "admin"},
        {"on_expiry": "escalate", "escalate_to": "admin", "escalate_after": timedelta(minutes=5)},
        {"escalate_to": "admin", "expires_after": timedelta(hours=1)},
        {"warn_before": timedelta(minutes=5)},
        {"expires_after": timedelta(hours=1), "warn_before": timedelta(0)},
        {"expires_after": timedelta(hours=-1)},
    ],
    ids=[
        "unknown",
        "no-length",
        "no-deadline",
        "role-without-escalate",
        "warn-no-deadline",
        "warn-zero",
        "negative",
    ],
)
def test_an_expiry_that_could_not_do_what_it_says_is_refused(kwargs):
    """Escalate needs a deadline, a role and a length; a warning needs a deadline; lengths are positive."""
    with pytest.raises(ValueError):
        RequireApproval(["place_order"], **kwargs)


async def test_each_tool_may_have_its_own_expiry(world):
    """ApprovalRules: the first rule that asks decides, so quotes deny at expiry while orders escalate."""
    rules = ApprovalRules(
        RequireApproval(["get_quote"], expires_after=timedelta(minutes=5)),
        escalating(),
    )
    w = world([act(quote(), buy()), answer("done")], policy=rules)
    loop = w.loop()
    await w.start(loop)
    state = w.checkpoints.load("t1", "run-1")
    assert state.action("1-1").approval.on_expiry == "deny"
    w.clock.advance(HOUR)
    assert loop.expire("t1", "run-1", "1-1") == "expired"
    result = await w.start(w.loop())  # the quote was denied; the order now waits, with its own policy
    order = result.state.action("1-2").approval
    assert order.on_expiry == "escalate" and order.escalate_to == "admin"


def test_the_failpoints_know_the_expiry_windows():
    """after_warning_audit and after_escalation_audit can be armed; an unknown window cannot."""
    from keelgate.loop import EXPIRY_WINDOWS

    assert EXPIRY_WINDOWS == ("after_warning_audit", "after_escalation_audit")
    Failpoints({"after_warning_audit": 1, "after_escalation_audit": 2})
    with pytest.raises(ValueError):
        Failpoints({"after_warnings_audit": 1})
