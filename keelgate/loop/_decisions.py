"""Decisions made outside the loop: approvals, denials, expiry, and settling unknown outcomes.

Each decision loads the latest checkpoint, changes one action, writes the audit event
and saves a newer checkpoint; the run then continues on its next resume. Because the
save refuses a stale sequence, two people deciding at once cannot both win: the second
gets :class:`~keelgate.errors.StaleCheckpointError` or sees the first decision.

The decisions are a collaborator of :class:`~keelgate.loop.Loop`, not a base of it: the
loop holds a :class:`Decisions`, hands it the few operations of its own a decision needs
(:class:`RunRecord`) and delegates its public decision methods to it. Three are used by
the loop's own drive too: :meth:`Decisions.escalate_if_due`,
:meth:`Decisions.recheck_unknown` and :meth:`Decisions.confirm`.

Expiry is decided here too: a deadline denies the call (fail closed) or, if its policy
says so, escalates it once to a named role with a new deadline; a warning is due before
each deadline. An expiry writes its audit event *before* the checkpoint that records it:
with stores that commit together (one SQLite file, one database) both land or neither
does, and with stores that commit alone a crash between them repeats the event rather
than losing it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Collection, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, ParamSpec, Protocol, TypeVar, runtime_checkable

from pydantic import ValidationError

from keelgate import tracing
from keelgate._state import ActionOutcome, ApprovalState, ApprovalVote, LoopState, PlannedAction
from keelgate._types import ActionStatus, Phase, StopReason
from keelgate.canonical import canonical_json, canonical_sha256
from keelgate.errors import (
    ActionNotFoundError,
    AlreadyDecidedError,
    ApprovalError,
    ApprovalEscalatedError,
    ApprovalExpiredError,
    ApprovalStaleError,
    ApproverRoleError,
    CallMayBeRunningError,
    ConfirmationRequiredError,
    DuplicateApproverError,
    EditInvalidError,
    InvalidResultError,
    KeyNotOwnedError,
    NoteRequiredError,
    NotReconcilableError,
    OutcomeAlreadySettledError,
    RunCancelledError,
    RunFinishedError,
)
from keelgate.gateway import SideEffect
from keelgate.gateway._gateway import call_fields
from keelgate.idempotency import KeyStatus

if TYPE_CHECKING:
    from keelgate.commits import CommitGroup
    from keelgate.loop._loop import Loop

__all__ = ["DecisionContext", "Decisions", "ExpiryResult", "OutcomeConfirmer", "RunRecord"]

ExpiryResult = Literal["escalated", "expired"]
"""What :meth:`~keelgate.loop.Loop.expire` did: handed the call to its escalation role,
or denied it (fail closed)."""

EXPIRY_ACTOR = "expiry"
"""Who the audit chain names for what a deadline did (warned, escalated)."""


@dataclass(frozen=True, kw_only=True)
class DecisionContext:
    """How a person's decision reached the engine, for its audit event; it decides nothing.

    The host knows how a request came and hands it over with the decision
    (:meth:`Loop.approve <keelgate.loop.Loop.approve>`, ``deny``, ``cancel``,
    ``reconcile``); the event then says ``via``, ``key_id`` and ``address`` beside who
    decided (its actor) and which call (``arguments_hash``).
    """

    via: str
    """The channel: ``"console"`` (a person's signed-in session), ``"api"`` (an API key),
    ``"chat"``; a host may name others."""
    key_id: str | None = None
    """The API key's id when ``via`` is ``"api"``: an identifier, never the secret."""
    address: str | None = None
    """The client's network address, as the host sees it (behind a proxy, the one the
    proxy reports)."""

    def fields(self) -> dict[str, str]:
        """The event's fields: ``via``, and ``key_id`` and ``address`` when known."""
        found = {"via": self.via, "key_id": self.key_id, "address": self.address}
        return {k: v for k, v in found.items() if v is not None}


def _how(context: DecisionContext | None) -> dict[str, str]:
    return context.fields() if context is not None else {}


@runtime_checkable
class OutcomeConfirmer(Protocol):
    """Settles an action whose outcome is unknown by asking the downstream system of record.

    Return True if the action took effect, False if it definitely did not, and None
    when the answer is not certain (the loop then stops for a human, as before). A
    mapping (the downstream record, e.g. ``{"order_id": ...}``) means it took effect
    and becomes the call's untrusted output, as a person's reconcile ``result`` does.
    """

    def confirm(
        self, action: PlannedAction, *, tenant_id: str, run_id: str
    ) -> bool | Mapping[str, Any] | Awaitable[bool | Mapping[str, Any] | None] | None:
        """Ask the system of record about ``action`` (its key is ``action.idempotency_key``)."""
        ...


class _Save(Protocol):
    def __call__(self, state: LoopState, *, active: bool = True) -> None: ...


class _Audit(Protocol):
    def __call__(self, state: LoopState, kind: str, actor: str | None = None, **body: Any) -> None: ...


@dataclass(frozen=True)
class RunRecord:
    """How a decision reads and writes its run: operations of the loop, handed over by it.

    ``load`` the latest state (RunNotFoundError without one); ``save`` a newer
    checkpoint (``active=False`` for a decision taken while the run is stopped: that
    time is not the run's); ``audit`` one event of the run; ``grouped`` a block whose
    writes commit together; ``key`` the idempotency key of a call the run plans.
    """

    load: Callable[[str, str], LoopState]
    save: _Save
    audit: _Audit
    grouped: Callable[[], AbstractContextManager[CommitGroup]]
    key: Callable[[LoopState, str, dict[str, Any]], str]


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _one_commit(method: Callable[_P, _R]) -> Callable[_P, _R]:
    """A decision's checkpoint, key settlement and audit event commit together."""

    @functools.wraps(method)
    def decided(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        decisions = args[0]
        assert isinstance(decisions, Decisions)
        with decisions.record.grouped():
            return method(*args, **kwargs)

    return decided


class Decisions:
    """Approve, deny, cancel, reconcile and expire, for one :class:`~keelgate.loop.Loop`.

    ``loop`` is read for its settings at each decision (its clock, gateway, confirmer,
    failpoints and commit group, which a host may replace), ``record`` for its run.
    The behaviour of each public method is documented on the Loop method of that name.
    """

    def __init__(self, loop: Loop, record: RunRecord) -> None:
        self.loop = loop
        self.record = record

    @_one_commit
    def approve(
        self,
        tenant_id: str,
        run_id: str,
        action_id: str,
        *,
        by: str,
        note: str = "",
        arguments: Mapping[str, Any] | None = None,
        seen: str | None = None,
        confirmed: bool = False,
        roles: Collection[str] | None = None,
        context: DecisionContext | None = None,
    ) -> LoopState:
        """One person's approval: :meth:`Loop.approve <keelgate.loop.Loop.approve>`."""
        state, action = self._awaiting(tenant_id, run_id, action_id)
        approval = action.approval
        assert approval is not None  # _awaiting guarantees it
        _check_role(approval, roles)
        current = canonical_sha256(action.arguments)
        if seen is not None and seen != current:
            raise ApprovalStaleError(action_id)
        if any(v.by == by for v in approval.approvals):
            raise DuplicateApproverError(by)
        if arguments is not None:
            edited = self._validated_edit(action, arguments)
            if edited is not None:
                return self._approve_edited(
                    state, action, edited, by=by, note=note, confirmed=confirmed, context=context
                )
        if approval.high_impact and not confirmed:
            raise ConfirmationRequiredError(action_id)
        approval.arguments_hash = approval.arguments_hash or current
        approval.approvals.append(
            ApprovalVote(by=by, at=self.loop.clock.now(), note=note, arguments_hash=current)
        )
        if approval.granted:
            action.outcome = ActionOutcome(status=ActionStatus.PENDING, at=self.loop.clock.now())
        self.record.save(state, active=False)
        self.record.audit(
            state,
            "approval.decided",
            actor=by,
            action_id=action_id,
            tool=action.tool,
            decision="approve",
            approvals=len(approval.approvals),
            required=approval.required,
            note=note,
            **self._call(state, action),
            high_impact=approval.high_impact,
            high_impact_confirmed=approval.high_impact and confirmed,
            **_how(context),
        )
        return state

    def _validated_edit(self, action: PlannedAction, arguments: Mapping[str, Any]) -> dict[str, Any] | None:
        """The edited arguments if valid and different from the proposal; None if the same."""
        tool = self.loop.gateway.tool(action.tool)
        if tool is None:
            raise EditInvalidError("the tool is not registered")
        try:
            # Strict, as JSON: a person's "5" is not the number 5, nor 1 a boolean.
            text = canonical_json(dict(arguments))
            edited = tool.arguments.model_validate_json(text, strict=True).model_dump(mode="json")
        except (TypeError, ValueError) as exc:
            if not isinstance(exc, ValidationError):
                raise EditInvalidError("the arguments are not JSON") from exc
            problems = [f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}" for e in exc.errors()]
            raise EditInvalidError("; ".join(problems)[:500]) from exc
        try:
            proposed = tool.arguments.model_validate(action.arguments).model_dump(mode="json")
        except ValidationError:
            proposed = dict(action.arguments)
        return None if edited == proposed else edited

    def _approve_edited(
        self,
        state: LoopState,
        action: PlannedAction,
        edited: dict[str, Any],
        *,
        by: str,
        note: str,
        confirmed: bool,
        context: DecisionContext | None,
    ) -> LoopState:
        """Deny the proposal as "edited by" ``by`` and write ahead the edited call, approved by them.

        The edited call is a new planned action with a key of its own (derived from its
        arguments), so the original can never run and a replayed original key cannot
        stand in for it. Under a two-person rule a second, different person must approve
        the edited call; the editor's vote counts once.
        """
        approval = action.approval
        assert approval is not None
        impact, high = self._assess(state, action, edited)
        if (high or approval.high_impact) and not confirmed:
            raise ConfirmationRequiredError(action.action_id)
        now = self.loop.clock.now()
        edits = sum(1 for a in state.actions if a.action_id.startswith(f"{action.action_id}.e"))
        new_id = f"{action.action_id}.e{edits + 1}"
        reason = f"edited by {by}: {new_id} replaces it"
        approval.denied_by, approval.denied_at, approval.note = by, now, reason
        approval.replaced_by = new_id
        action.outcome = ActionOutcome(
            status=ActionStatus.DENIED, code="approval_denied", detail=reason, settled_by=by, at=now
        )
        edited_hash = canonical_sha256(edited)
        replacement = PlannedAction(
            action_id=new_id,
            iteration=action.iteration,
            tool=action.tool,
            arguments=edited,
            idempotency_key=self.record.key(state, action.tool, edited),
            rationale=f"edited by {by} from {action.action_id}",
            side_effect=action.side_effect,
            outcome=ActionOutcome(status=ActionStatus.AWAITING_APPROVAL, at=now),
            approval=ApprovalState(
                required=approval.required,
                approver_roles=list(approval.approver_roles),
                reason=approval.reason,
                requested_at=now,
                expires_at=approval.expires_at,
                arguments_hash=edited_hash,
                edit_of=action.action_id,
                impact=impact,
                high_impact=high,
                approvals=[ApprovalVote(by=by, at=now, note=note, arguments_hash=edited_hash)],
                # The same deadline and what it does; an escalated call stays escalated.
                on_expiry=approval.on_expiry,
                escalate_to=approval.escalate_to,
                escalate_after=approval.escalate_after,
                warn_before=approval.warn_before,
                escalated_to=approval.escalated_to,
                escalated_at=approval.escalated_at,
            ),
        )
        if replacement.approval is not None and replacement.approval.granted:
            replacement.outcome = ActionOutcome(status=ActionStatus.PENDING, at=now)
        state.actions.insert(state.actions.index(action) + 1, replacement)
        self.record.save(state, active=False)
        changed = sorted(
            k for k in set(edited) | set(action.arguments) if edited.get(k) != action.arguments.get(k)
        )
        clear: dict[str, Any] = {}
        if self.loop.gateway.records_arguments(state.tenant_id):
            # The proposal's arguments, the edited call's, and each changed field old -> new.
            clear = {
                "arguments": dict(action.arguments),
                "edited_arguments": edited,
                "changes": {k: {"old": action.arguments.get(k), "new": edited.get(k)} for k in changed},
            }
            lines = {"impact": approval.impact, "edited_impact": impact}
            clear.update({k: v for k, v in lines.items() if v})
        self.record.audit(
            state,
            "approval.edited",
            actor=by,
            action_id=action.action_id,
            new_action_id=new_id,
            tool=action.tool,
            original_hash=canonical_sha256(action.arguments),
            edited_hash=edited_hash,
            changed=changed,
            note=note,
            **clear,
            high_impact=high or approval.high_impact,
            high_impact_confirmed=(high or approval.high_impact) and confirmed,
            **_how(context),
        )
        return state

    def _assess(self, state: LoopState, action: PlannedAction, edited: dict[str, Any]) -> tuple[str, bool]:
        """The edited call's plain-words line and high-impact mark, as the gateway would give them."""
        tool = self.loop.gateway.tool(action.tool)
        assert tool is not None  # _validated_edit checked it
        model = tool.arguments.model_validate(edited)
        requirement = self.loop.gateway.policy.requirement(
            agent_id=state.agent_id, tool=tool, arguments=model
        )
        observations = tuple(
            a.outcome.output
            for a in state.actions
            if a.iteration == action.iteration and a.side_effect is SideEffect.READ and a.outcome.output
        )
        return tool.impact(model, observations), bool(requirement and requirement.high_impact)

    @_one_commit
    def cancel(
        self, tenant_id: str, run_id: str, *, by: str, note: str = "", context: DecisionContext | None = None
    ) -> LoopState:
        """A person's cancel: :meth:`Loop.cancel <keelgate.loop.Loop.cancel>`."""
        state = self.record.load(tenant_id, run_id)
        if state.stop_reason is StopReason.CANCELLED:
            return state
        if state.phase is Phase.DONE:
            raise RunFinishedError(run_id)
        now = self.loop.clock.now()
        withdrawn: list[str] = []
        calls: list[dict[str, Any]] = []
        for action in state.actions:
            approval = action.approval
            if (
                approval is not None
                and action.status is ActionStatus.AWAITING_APPROVAL
                and not approval.settled
            ):
                approval.withdrawn = True
                action.outcome = ActionOutcome(
                    status=ActionStatus.DENIED,
                    code=RunCancelledError.code,
                    detail=f"cancelled by {by}",
                    settled_by=by,
                    at=now,
                )
                withdrawn.append(action.action_id)
                calls.append(
                    {"action_id": action.action_id, "tool": action.tool, **self._call(state, action)}
                )
        state.stop_reason = StopReason.CANCELLED
        self.record.save(state, active=False)
        self.record.audit(
            state,
            "run.cancelled",
            actor=by,
            note=note,
            withdrawn=withdrawn,
            withdrawn_calls=calls,
            **_how(context),
        )
        return state

    @_one_commit
    def deny(
        self,
        tenant_id: str,
        run_id: str,
        action_id: str,
        *,
        by: str,
        note: str,
        roles: Collection[str] | None = None,
        context: DecisionContext | None = None,
    ) -> LoopState:
        """One person's denial: :meth:`Loop.deny <keelgate.loop.Loop.deny>`."""
        if not note.strip():
            raise NoteRequiredError()
        state, action = self._awaiting(tenant_id, run_id, action_id)
        approval = action.approval
        assert approval is not None
        _check_role(approval, roles)
        now = self.loop.clock.now()
        approval.denied_by, approval.denied_at, approval.note = by, now, note
        action.outcome = ActionOutcome(
            status=ActionStatus.DENIED, code="approval_denied", detail=note, settled_by=by, at=now
        )
        self.record.save(state, active=False)
        self.record.audit(
            state,
            "approval.decided",
            actor=by,
            action_id=action_id,
            tool=action.tool,
            decision="deny",
            note=note,
            **self._call(state, action),
            high_impact=approval.high_impact,
            **_how(context),
        )
        return state

    @_one_commit
    def reconcile_now(
        self,
        tenant_id: str,
        run_id: str,
        action_id: str,
        *,
        executed: bool,
        by: str,
        note: str = "",
        result: Mapping[str, Any] | None = None,
        context: DecisionContext | None = None,
    ) -> LoopState:
        """A person settling an unknown outcome: :meth:`keelgate.loop.Loop.reconcile_now`."""
        output = _result_text(executed, result)
        state = self.record.load(tenant_id, run_id)
        action = state.action(action_id)
        if action is None:
            raise ActionNotFoundError(action_id)
        if action.status is not ActionStatus.UNKNOWN:
            if action.outcome.settled_by:
                raise OutcomeAlreadySettledError(action.outcome.settled_by)
            raise NotReconcilableError(f"{action_id} is {action.status.value}")
        running_until = self._may_be_running(state, action)
        if running_until is not None:
            raise CallMayBeRunningError(running_until.isoformat())
        self._settle(
            state,
            action,
            executed=executed,
            by=by,
            source="human",
            note=note,
            output=output,
            context=context,
        )
        self.record.save(state, active=False)
        return state

    # -- used by the loop -------------------------------------------------------

    @_one_commit
    def expire(self, tenant_id: str, run_id: str, action_id: str) -> ExpiryResult | None:
        """A deadline that passed: :meth:`Loop.expire <keelgate.loop.Loop.expire>`."""
        state = self.record.load(tenant_id, run_id)
        action = state.action(action_id)
        if action is None:
            raise ActionNotFoundError(action_id)
        approval = action.approval
        if approval is None or action.status is not ActionStatus.AWAITING_APPROVAL:
            return None
        due = approval.expiry_due(self.loop.clock.now())
        if due == "escalate":
            self.escalate_if_due(state, action)
            self.record.save(state, active=False)
            return "escalated"
        if due == "deny":
            self._deny_expired(state, action)
            return "expired"
        return None

    @_one_commit
    def warn_expiring(self, tenant_id: str, run_id: str, action_id: str) -> bool:
        """A deadline that is near: :meth:`Loop.warn_expiring <keelgate.loop.Loop.warn_expiring>`."""
        state = self.record.load(tenant_id, run_id)
        action = state.action(action_id)
        if action is None:
            raise ActionNotFoundError(action_id)
        approval = action.approval
        now = self.loop.clock.now()
        if approval is None or action.status is not ActionStatus.AWAITING_APPROVAL:
            return False
        if not approval.warning_due(now):
            return False
        assert approval.expires_at is not None  # warning_due guarantees it
        body: dict[str, Any] = {
            "action_id": action_id,
            "tool": action.tool,
            "expires_at": approval.expires_at.isoformat(),
        }
        if approval.escalates_to is not None:
            body["escalates_to"] = approval.escalates_to
        self.record.audit(state, "approval.expiring", actor=EXPIRY_ACTOR, **body)
        self.loop.failpoints.hit("after_warning_audit")
        approval.warned_at, approval.warned_for = now, approval.expires_at
        self.record.save(state, active=False)
        return True

    def escalate_if_due(self, state: LoopState, action: PlannedAction) -> bool:
        """Escalate an open approval whose deadline passed, if its policy says so. True if now.

        Audited first (``approval.escalated``: the role, the new deadline and the one
        that passed), then changed in ``state``; the caller saves it.
        """
        approval = action.approval
        now = self.loop.clock.now()
        if approval is None or approval.expiry_due(now) != "escalate":
            return False
        role, length, passed = approval.escalates_to, approval.escalate_after, approval.expires_at
        assert role is not None and length is not None and passed is not None  # expiry_due checked
        deadline = now + length
        self.record.audit(
            state,
            "approval.escalated",
            actor=EXPIRY_ACTOR,
            action_id=action.action_id,
            tool=action.tool,
            escalated_to=role,
            expires_at=deadline.isoformat(),
            previous_expires_at=passed.isoformat(),
        )
        self.loop.failpoints.hit("after_escalation_audit")
        approval.escalated_to, approval.escalated_at, approval.expires_at = role, now, deadline
        return True

    def _deny_expired(self, state: LoopState, action: PlannedAction) -> None:
        """Deny the call whose deadline passed (fail closed), saved and audited."""
        approval = action.approval
        assert approval is not None
        now = self.loop.clock.now()
        self.record.audit(
            state,
            "approval.expired",
            action_id=action.action_id,
            tool=action.tool,
            **self._call(state, action),
        )
        approval.expired = True
        action.outcome = ActionOutcome(status=ActionStatus.DENIED, code=ApprovalExpiredError.code, at=now)
        self.record.save(state, active=False)

    def _call(self, state: LoopState, action: PlannedAction) -> dict[str, Any]:
        """The event's fields naming ``action``'s call: its hash, its arguments if the tenant allows."""
        clear = self.loop.gateway.records_arguments(state.tenant_id)
        impact = action.approval.impact if action.approval is not None else ""
        return call_fields(action.arguments, clear=clear, impact=impact)

    def _awaiting(self, tenant_id: str, run_id: str, action_id: str) -> tuple[LoopState, PlannedAction]:
        state = self.record.load(tenant_id, run_id)
        action = state.action(action_id)
        if action is None:
            raise ActionNotFoundError(action_id)
        approval = action.approval
        if approval is None:
            raise ApprovalError(action_id)
        if approval.withdrawn:  # the run was cancelled: the person who cancelled it settled this
            raise AlreadyDecidedError(action.outcome.settled_by or "cancelled")
        if approval.denied_by or approval.granted:
            raise AlreadyDecidedError(approval.denied_by or approval.approvals[-1].by)
        if approval.expired:
            raise ApprovalExpiredError(action_id)
        if action.status is ActionStatus.AWAITING_APPROVAL:
            due = approval.expiry_due(self.loop.clock.now())
            if due == "escalate":  # the deadline passed just now: saved, whatever the caller does
                self.escalate_if_due(state, action)
                self.record.save(state, active=False)
            elif due == "deny":
                self._deny_expired(state, action)
                raise ApprovalExpiredError(action_id)
        if action.status is not ActionStatus.AWAITING_APPROVAL:
            raise ApprovalError(action_id)
        return state, action

    async def recheck_unknown(self, state: LoopState, action: PlannedAction) -> bool:
        """On resume: the key store's record first, then the confirmer. True when settled."""
        record = self.loop.gateway.idempotency.get(state.tenant_id, action.idempotency_key)
        if record is not None and record.status is KeyStatus.COMPLETED:
            stored = (
                ActionOutcome.model_validate_json(record.outcome)
                if record.outcome
                else ActionOutcome(status=ActionStatus.DONE, settled_by=record.settled_by)
            )
            action.outcome = stored.model_copy(update={"replayed": True})
            self.record.save(state)
            tracing.unknown_wait(
                state, action, since=record.claimed_at, verdict="executed", source="key_store"
            )
            return True
        if record is not None and record.status is KeyStatus.ABANDONED:
            action.outcome = ActionOutcome(
                status=ActionStatus.ABANDONED, settled_by=record.settled_by, at=record.completed_at
            )
            self.record.save(state)
            tracing.unknown_wait(
                state, action, since=record.claimed_at, verdict="not_executed", source="key_store"
            )
            return True
        return await self.confirm(state, action, save=True)

    def _may_be_running(self, state: LoopState, action: PlannedAction) -> datetime | None:
        """Until when the call may still be running elsewhere, or None if it surely ended.

        A key in flight under a live lease may belong to a worker that is inside the
        tool right now: settling it as not executed could be contradicted a moment
        later. The call surely ended when this gateway saw the tool raise, or when the
        key's lease has run out (its owner is gone).
        """
        if action.outcome.code == "outcome_unknown" and action.outcome.detail not in ("in_flight", ""):
            return None  # the gateway saw the tool raise: it returned, with an exception
        record = self.loop.gateway.idempotency.get(state.tenant_id, action.idempotency_key)
        if record is None or record.status is not KeyStatus.IN_FLIGHT:
            return None
        if record.lease_expires_at > self.loop.clock.now():
            return record.lease_expires_at
        return None

    async def confirm(self, state: LoopState, action: PlannedAction, *, save: bool) -> bool:
        """Ask the confirmer; only a definite True or False settles the action."""
        if self.loop.confirmer is None or self._may_be_running(state, action) is not None:
            return False
        self.loop.commit_group.barrier()  # the confirmer is outside
        try:
            answer: Any = self.loop.confirmer.confirm(action, tenant_id=state.tenant_id, run_id=state.run_id)
            if inspect.isawaitable(answer):
                answer = await answer
        except Exception:  # an unsure confirmer leaves the decision to a person
            return False
        output = None
        if isinstance(answer, Mapping):  # a definite yes, with the downstream record
            try:
                output = _result_text(True, answer)
            except InvalidResultError:
                return False
            answer = True
        if answer is not True and answer is not False:
            return False
        name = getattr(self.loop.confirmer, "name", type(self.loop.confirmer).__name__)
        self._settle(
            state, action, executed=answer, by=f"confirmer:{name}", source="confirmer", output=output
        )
        if save:
            self.record.save(state)
        return True

    def _settle(
        self,
        state: LoopState,
        action: PlannedAction,
        *,
        executed: bool,
        by: str,
        source: str,
        note: str = "",
        output: str | None = None,
        context: DecisionContext | None = None,
    ) -> None:
        """Write the verdict to the key store, the action and the audit chain.

        ``output`` is the downstream record the settler found (JSON text), or None; it is
        never audited. The event names the call by its ``arguments_hash`` (its arguments
        only where the tenant's policy allows) and, for a person, how the decision came.
        """
        now = self.loop.clock.now()
        status = ActionStatus.DONE if executed else ActionStatus.ABANDONED
        outcome = ActionOutcome(status=status, detail=note, output=output, settled_by=by, at=now)
        verdict = "executed" if executed else "not_executed"
        since = None  # when the call was claimed: the unknown outcome's wait began then
        if action.side_effect is not SideEffect.READ:
            try:
                since = self.loop.gateway.idempotency.settle(
                    state.tenant_id,
                    action.idempotency_key,
                    executed=executed,
                    by=by,
                    outcome=outcome.model_dump_json() if executed else None,
                    now=now,
                ).claimed_at
            except KeyNotOwnedError:
                record = self.loop.gateway.idempotency.get(state.tenant_id, action.idempotency_key)
                since = record.claimed_at if record is not None else None
                if record is not None and record.status is KeyStatus.COMPLETED and record.outcome:
                    # The call did return after all: its durable record outranks a guess.
                    outcome = ActionOutcome.model_validate_json(record.outcome)
                    source, verdict = "idempotency_store", "executed"
        action.outcome = outcome
        self.record.audit(
            state,
            "loop.reconciled",
            actor=by,
            action_id=action.action_id,
            tool=action.tool,
            source=source,
            verdict=verdict,
            note=note,
            result_recorded=action.outcome.output is not None and executed,
            **self._call(state, action),
            **_how(context),
        )
        tracing.unknown_wait(state, action, since=since, verdict=verdict, source=source)


def _check_role(approval: ApprovalState, roles: Collection[str] | None) -> None:
    """An escalated approval is decided only by someone holding its escalation role, and
    one whose policy names ``approver_roles`` only by someone holding one of them."""
    if approval.escalated_to is not None and approval.escalated_to not in (roles or ()):
        raise ApprovalEscalatedError(approval.escalated_to)
    if approval.approver_roles and not set(approval.approver_roles) & set(roles or ()):
        raise ApproverRoleError(", ".join(approval.approver_roles))


MAX_RESULT_BYTES = 16_384
"""The largest downstream record a reconcile may carry, as canonical JSON."""


def _result_text(executed: bool, result: object) -> str | None:
    """The canonical JSON of a reconcile's ``result``, or None; InvalidResultError if unusable."""
    if result is None:
        return None
    if not executed:
        raise InvalidResultError("a result is only recorded for an executed call")
    if not isinstance(result, Mapping):
        raise InvalidResultError("the result must be a JSON object")
    try:
        text = canonical_json(dict(result))
    except (TypeError, ValueError) as exc:
        raise InvalidResultError("the result is not JSON") from exc
    if len(text.encode("utf-8")) > MAX_RESULT_BYTES:
        raise InvalidResultError(f"the result is larger than {MAX_RESULT_BYTES} bytes")
    return text
