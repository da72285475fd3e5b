"""The durable agent loop: plan, act, observe, verify, then revise or stop.

The loop is a state machine over :class:`LoopState`. Each phase does its work, saves a
checkpoint with a newer sequence number, then moves on; a resume simply continues the
phase the last checkpoint names. Planned actions are saved before any of them runs
(write-ahead), so a resume re-submits them and never asks the planner again, and
side-effecting calls go through the idempotency store, so a completed one is replayed,
never re-run. Human decisions (approve, deny, cancel, reconcile, expiry) are the work of
a collaborator the loop holds, :class:`~keelgate.loop._decisions.Decisions`; the loop's
public methods of those names delegate to it.
"""

from __future__ import annotations

import inspect
import os
import socket
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime
from typing import Any

from keelgate import tracing
from keelgate._state import ErrorInfo, LoopState, PlannedAction, VerdictRecord
from keelgate._types import ActionStatus, LoopType, Phase, StopReason
from keelgate.audit import AuditLog, RecordingAuditLog
from keelgate.checkpoint import CheckpointStore
from keelgate.clock import Clock, SystemClock
from keelgate.commits import CommitGroup, shared_group
from keelgate.errors import (
    ConfigurationError,
    CrashFailpoint,
    KeelgateError,
    PlannerError,
    RunExistsError,
    RunNotFoundError,
    StaleCheckpointError,
)
from keelgate.gateway import ALL_SIDE_EFFECTS, READ_ONLY, Gateway, SideEffect
from keelgate.gateway._gateway import CallContext
from keelgate.idempotency import KeyStatus, derive_key
from keelgate.loop._budget import ModelPrice, StopConditions, cost_of, limit_reached, precall_stop
from keelgate.loop._context import ContextItem, ContextSource, build_messages
from keelgate.loop._decisions import DecisionContext, Decisions, ExpiryResult, OutcomeConfirmer, RunRecord
from keelgate.loop._failpoints import Failpoints
from keelgate.loop._planner import Plan, Planner, PlanRequest
from keelgate.loop._result import LoopResult, is_resumable
from keelgate.loop._verifier import (
    UNPARSEABLE,
    AcceptAllVerifier,
    Verdict,
    VerdictDecision,
    Verifier,
    VerifyRequest,
    as_verdict,
)

__all__ = ["DEFAULT_STOP", "Loop", "VerificationLoop"]

DEFAULT_STOP = StopConditions(max_iterations=20)
"""Used when neither the loop nor the call gives limits: no run is unbounded by accident."""

_WAITING = (ActionStatus.PENDING, ActionStatus.AWAITING_APPROVAL, ActionStatus.UNKNOWN)


class Loop:
    """The durable agent loop: plan, act, observe, verify, then revise or stop.

    Checkpoints every step, honours the stop conditions, and resumes without
    re-planning or repeating a completed WRITE.
    """

    def __init__(
        self,
        *,
        planner: Planner,
        gateway: Gateway,
        checkpoints: CheckpointStore,
        verifier: Verifier | None = None,
        stop: StopConditions | None = None,
        loop_type: LoopType = LoopType.TASK,
        allowed_side_effects: frozenset[SideEffect] | set[SideEffect] | None = None,
        confirmer: OutcomeConfirmer | None = None,
        pricing: Mapping[str, ModelPrice] | None = None,
        price_model: str | None = None,
        context: Sequence[ContextSource] = (),
        clock: Clock | None = None,
        failpoints: Failpoints | None = None,
        owner: str | None = None,
        should_stop: Callable[[], bool | StopReason] | None = None,
    ) -> None:
        self.planner = planner
        self.gateway = gateway
        self.checkpoints = checkpoints
        self.audit: AuditLog = gateway.audit
        self.verifier: Verifier = verifier or AcceptAllVerifier()
        self.stop = stop
        self.loop_type = loop_type
        if allowed_side_effects is None:
            allowed_side_effects = ALL_SIDE_EFFECTS if loop_type is LoopType.TASK else READ_ONLY
        self.allowed_side_effects = frozenset(allowed_side_effects)
        if loop_type is LoopType.VERIFICATION and self.allowed_side_effects - READ_ONLY:
            # ADR-0004: verification loops are READ-only, enforced, whoever builds them.
            raise ConfigurationError("a verification loop may only READ")
        self.confirmer = confirmer
        self.pricing: Mapping[str, ModelPrice] = pricing or {}
        self.price_model = price_model
        self.context = tuple(context)
        self.clock: Clock = clock or gateway.clock or SystemClock()
        self.failpoints = failpoints or Failpoints.from_env() or Failpoints()
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.should_stop = should_stop
        """Asked at every phase boundary; True stops the run there, resumable (INTERRUPTED);
        ``StopReason.CANCELLED`` stops it for good (a person cancelled it)."""
        self._tick_at = 0.0
        self._group_of: tuple[tuple[int, ...], CommitGroup] | None = None
        self._audit_of: tuple[AuditLog, Callable[..., Any]] | None = None
        record = RunRecord(
            load=self._load, save=self._save, audit=self._audit, grouped=self._grouped, key=self._key
        )
        self._decisions = Decisions(self, record)

    @property
    def commit_group(self) -> CommitGroup:
        """What groups this loop's writes: shared by its three stores, else nothing."""
        stores = (self.checkpoints, self.gateway.idempotency, self.audit)
        ids = tuple(map(id, stores))
        if self._group_of is None or self._group_of[0] != ids:
            self._group_of = (ids, shared_group(*stores))
        return self._group_of[1]

    @contextmanager
    def _grouped(self) -> Iterator[CommitGroup]:
        """Group writes until the block ends; a simulated crash drops the unflushed ones."""
        group = self.commit_group
        group.hold()
        try:
            yield group
        except CrashFailpoint:
            group.discard()
            raise
        except BaseException:
            group.release()
            raise
        group.release()

    # -- public API ---------------------------------------------------------------

    async def run(
        self,
        *,
        goal: str,
        tenant_id: str,
        agent_id: str,
        as_of: datetime,
        run_id: str | None = None,
        trace_id: str | None = None,
        stop: StopConditions | None = None,
    ) -> LoopResult:
        """Start a new run. Refuses an id that already has a checkpoint."""
        run_id = run_id or uuid.uuid4().hex
        if self.checkpoints.load(tenant_id, run_id) is not None:
            raise RunExistsError(run_id)
        return await self._start(
            goal=goal,
            tenant_id=tenant_id,
            agent_id=agent_id,
            as_of=as_of,
            run_id=run_id,
            trace_id=trace_id,
            stop=stop,
        )

    async def _start(
        self,
        *,
        goal: str,
        tenant_id: str,
        agent_id: str,
        as_of: datetime,
        run_id: str,
        trace_id: str | None,
        stop: StopConditions | None,
    ) -> LoopResult:
        """:meth:`run` once the caller has seen no checkpoint of ``run_id``.

        A writer that saves one in between is refused by the store: the first
        checkpoint (seq 1) of an id that has one is not newer. That refusal may only
        come with a later round trip of a database store (after the planner, once the
        first writes were parked at its barrier); nothing of this start is written.
        """
        conditions = stop or self.stop or DEFAULT_STOP
        now = self.clock.now()
        state = LoopState(
            tenant_id=tenant_id,
            run_id=run_id,
            agent_id=agent_id,
            goal=goal,
            as_of=as_of,
            trace_id=trace_id or uuid.uuid4().hex,
            loop_type=self.loop_type,
            allowed_side_effects=sorted(self.allowed_side_effects),
            limits=conditions.to_limits(),
            created_at=now,
        )
        self._tick_at = self.clock.monotonic()
        with self._grouped():
            try:
                self._save(state)
                opted_in = sorted(e.value for e in self.allowed_side_effects - READ_ONLY)
                if self.loop_type is LoopType.MONITOR and opted_in:
                    # A monitor is READ-only unless its caller opted in: the chain says so.
                    self._audit(
                        state, "run.started", loop_type=state.loop_type.value, side_effects_opt_in=opted_in
                    )
                else:
                    self._audit(state, "run.started", loop_type=state.loop_type.value)
            except StaleCheckpointError as exc:  # raised by the save, or with the next round trip
                raise RunExistsError(run_id) from exc
            return await self._drive(state, conditions)

    async def resume(
        self,
        tenant_id: str,
        run_id: str,
        *,
        stop: StopConditions | None = None,
    ) -> LoopResult:
        """Continue a stopped or interrupted run from its latest checkpoint.

        Pass a new ``stop`` to continue after a budget stop with a larger budget.
        """
        state = self._load(tenant_id, run_id)
        conditions = stop or StopConditions.from_limits(
            state.limits, goal=self.stop.goal if self.stop else None
        )
        if stop is not None:
            state.limits = stop.to_limits()
        if state.phase is Phase.DONE:
            return self._result(state, StopReason.GOAL_REACHED)
        if state.stop_reason is StopReason.CANCELLED:
            return self._result(state, StopReason.CANCELLED)  # cancelled is final: nothing runs
        self._tick_at = self.clock.monotonic()
        with self._grouped():
            return await self._drive(state, conditions)

    async def run_or_resume(
        self,
        *,
        goal: str,
        tenant_id: str,
        agent_id: str,
        as_of: datetime,
        run_id: str,
        trace_id: str | None = None,
        stop: StopConditions | None = None,
    ) -> LoopResult:
        """Idempotent start: resume the run if it exists, otherwise begin it."""
        if self.checkpoints.load(tenant_id, run_id) is not None:
            return await self.resume(tenant_id, run_id, stop=stop)
        return await self._start(  # read once: run() would read the checkpoint again
            goal=goal,
            tenant_id=tenant_id,
            agent_id=agent_id,
            as_of=as_of,
            run_id=run_id,
            trace_id=trace_id,
            stop=stop,
        )

    # -- decisions, taken outside the drive (the work is in _decisions.py) -----

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
        """Record one person's approval; the call runs on resume once enough people agree.

        Synchronous, like :meth:`deny` and :meth:`reconcile_now`: a decision is one
        load, one change and one save, and web handlers call it inside their own
        database transaction.

        ``seen`` is the ``canonical_sha256`` of the arguments the person was shown: if the
        call has others, :class:`~keelgate.errors.ApprovalStaleError` and nothing changes.
        With ``arguments`` that differ from the proposal, the person approves an edited
        call instead: the proposal is denied as edited and the edited call, a new action
        with its own key, is approved by them; arguments that change nothing are a plain
        approval. A high-impact call (the policy's mark, for the proposal or the
        edit) is approved only with ``confirmed``; otherwise ConfirmationRequiredError.

        ``roles`` are the roles the person holds, each one their role includes (the host
        knows its roles; the engine does not rank them). An approval its deadline
        escalated counts only from someone holding the escalation role:
        ApprovalEscalatedError otherwise, also when the deadline passes with this very
        call (the escalation is then saved, the approval not).

        ``context`` says how the decision came (:class:`~keelgate.loop.DecisionContext`:
        the channel, an API key's id, the client's address); its audit event records it,
        with the call's ``arguments_hash`` and whether a high-impact confirmation was given.
        """
        return self._decisions.approve(
            tenant_id,
            run_id,
            action_id,
            by=by,
            note=note,
            arguments=arguments,
            seen=seen,
            confirmed=confirmed,
            roles=roles,
            context=context,
        )

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
        """Deny the call; the planner sees the denial and ``note`` on the next step.

        ``roles`` and ``context`` as for :meth:`approve`: an escalated approval is denied
        only by its escalation role.
        """
        return self._decisions.deny(
            tenant_id, run_id, action_id, by=by, note=note, roles=roles, context=context
        )

    def cancel(
        self, tenant_id: str, run_id: str, *, by: str, note: str = "", context: DecisionContext | None = None
    ) -> LoopState:
        """Cancel a run that no loop is driving now: it stops for good, its approvals withdrawn.

        A call that waits for approval is withdrawn (it never runs); an unknown outcome
        stays for a person to settle, since it may have happened. Cancelling a cancelled
        run changes nothing; a finished one is RunFinishedError. A run being driven is
        cancelled by its host instead, through ``should_stop`` (``StopReason.CANCELLED``).
        ``context`` as for :meth:`approve`.
        """
        return self._decisions.cancel(tenant_id, run_id, by=by, note=note, context=context)

    async def reconcile(
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
        """A human settles an action whose outcome was unknown.

        ``executed=True`` records it as done; ``executed=False`` abandons it. Either way
        the action is never run again. If it must be attempted afresh, plan a new action
        with a new idempotency key.

        ``result`` (a JSON object, executed only) is what the person found downstream,
        for example ``{"order_id": "PB-000001"}``: the planner sees it as the call's
        untrusted output. Without one it is told the result was not recorded. ``context``
        as for :meth:`approve`.
        """
        return self._decisions.reconcile_now(
            tenant_id, run_id, action_id, executed=executed, by=by, note=note, result=result, context=context
        )

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
        """:meth:`reconcile`, synchronously (for callers inside a database transaction)."""
        return self._decisions.reconcile_now(
            tenant_id, run_id, action_id, executed=executed, by=by, note=note, result=result, context=context
        )

    def expire(self, tenant_id: str, run_id: str, action_id: str) -> ExpiryResult | None:
        """Apply a deadline that passed: escalate the call once if its policy says so, else deny it.

        ``"escalated"``: it waits for the escalation role with a new deadline
        (``approval.escalated``, by ``expiry``); ``"expired"``: denied, fail closed
        (``approval.expired``). None when there is nothing to do: not yet due, or decided.
        """
        return self._decisions.expire(tenant_id, run_id, action_id)

    def warn_expiring(self, tenant_id: str, run_id: str, action_id: str) -> bool:
        """Give the warning that a deadline is near, once per approval and deadline. True if given now.

        Due ``warn_before`` ahead of each deadline of an open approval (so an escalated
        one is warned again before its new deadline). Appends ``approval.expiring`` by
        ``expiry`` with ``action_id``, ``tool``, ``expires_at`` and, if the deadline
        escalates, ``escalates_to``; the checkpoint then records the warning. Late (the
        deadline already passed) there is nothing to warn of: :meth:`expire` applies it.
        """
        return self._decisions.warn_expiring(tenant_id, run_id, action_id)

    # -- the state machine -----------------------------------------------------

    async def _drive(self, state: LoopState, stop: StopConditions) -> LoopResult:
        with tracing.run_span(state) as span:
            result = await self._phases(state, stop)
            span.set("stop_reason", result.stop_reason.value)
            return result

    async def _phases(self, state: LoopState, stop: StopConditions) -> LoopResult:
        state.stop_reason = None
        state.error = None
        while True:
            self._tick(state)
            if state.phase is Phase.DONE:
                return await self._stop(state, StopReason.GOAL_REACHED)
            reason = limit_reached(state)
            if reason is None and self.should_stop is not None:
                asked = self.should_stop()
                if asked:
                    reason = asked if asked is StopReason.CANCELLED else StopReason.INTERRUPTED
            if reason is not None:
                return await self._stop(state, reason)
            if state.phase is Phase.PLAN:
                with tracing.step_span("keelgate.plan", state):
                    result = await self._plan(state)
            elif state.phase is Phase.ACT:
                result = await self._act(state)
            elif state.phase is Phase.OBSERVE:
                result = self._observe(state, stop)
            else:
                with tracing.step_span("keelgate.verify", state):
                    result = await self._verify(state)
            if result is not None:
                return result

    async def _plan(self, state: LoopState) -> LoopResult | None:
        self.commit_group.barrier()  # context sources and the planner are outside
        extra = await self._context_items(state)
        request = PlanRequest(
            tenant_id=state.tenant_id,
            run_id=state.run_id,
            agent_id=state.agent_id,
            goal=state.goal,
            as_of=state.as_of,
            iteration=state.iteration + 1,
            messages=build_messages(state, extra),
            tools=self.gateway.specs(state.agent_id, self._allowed(state)),
        )
        estimate = getattr(self.planner, "estimate_tokens", None)
        estimated = int(estimate(request)) if callable(estimate) else request.estimated_input_tokens()
        reason = precall_stop(
            state,
            estimated_input_tokens=estimated,
            pricing=self.pricing,
            price_model=self.price_model,
        )
        if reason is not None:
            return await self._stop(state, reason)
        try:
            plan = self.planner.plan(request)
            if inspect.isawaitable(plan):
                plan = await plan
            if not isinstance(plan, Plan):
                raise PlannerError(type(plan).__name__)
        except KeelgateError as exc:
            return await self._stop(state, StopReason.ERROR, ErrorInfo(code=exc.code, detail=exc.detail))
        except Exception as exc:  # an untrusted planner failing is an outcome, not a crash
            return await self._stop(
                state,
                StopReason.ERROR,
                ErrorInfo(code=PlannerError.code, detail=type(exc).__name__),
            )
        unpriced = self._account(state, plan)
        state.iteration += 1
        if plan.actions:
            state.actions.extend(self._write_ahead(state, plan))
            state.phase = Phase.ACT
        else:
            state.final_answer = plan.final_answer
            state.phase = Phase.VERIFY
        self._save(state)
        self._audit(
            state,
            "loop.planned",
            iteration=state.iteration,
            actions=[
                {"action_id": a.action_id, "tool": a.tool, "idempotency_key": a.idempotency_key}
                for a in state.current_actions
            ],
            final_answer=not plan.actions,
        )
        self.commit_group.flush()  # the plan was paid for, and it is the write-ahead log
        self.failpoints.hit("after_plan")
        if unpriced:
            return await self._stop(state, StopReason.COST_UNKNOWN)
        return None

    async def _act(self, state: LoopState) -> LoopResult | None:
        ctx = CallContext(
            tenant_id=state.tenant_id,
            run_id=state.run_id,
            agent_id=state.agent_id,
            owner=self.owner,
            allowed_side_effects=self._allowed(state),
        )
        for action in state.current_actions:
            if action.status not in _WAITING:
                continue
            self._tick(state)
            reason = limit_reached(state)
            if reason is not None:
                return await self._stop(state, reason)
            self.failpoints.hit("before_action")
            if action.status is ActionStatus.UNKNOWN:
                settled = await self._decisions.recheck_unknown(state, action)
                if not settled:
                    return await self._stop(state, StopReason.OUTCOME_UNKNOWN)
                continue
            if action.status is ActionStatus.AWAITING_APPROVAL:
                # A deadline that passed while nobody looked escalates here, if its policy
                # says so; otherwise the gateway denies the call (fail closed).
                self._decisions.escalate_if_due(state, action)
            seen = tuple(
                a.outcome.output
                for a in state.current_actions
                if a.side_effect is SideEffect.READ and a.status is ActionStatus.DONE and a.outcome.output
            )
            with tracing.tool_call_span(state, action) as call:
                result = await self.gateway.execute(replace(ctx, observations=seen), action)
                tracing.call_finished(call, result.outcome)
            self.failpoints.hit("after_gateway_call")
            action.outcome = result.outcome
            action.approval = result.approval
            if action.outcome.status is ActionStatus.UNKNOWN:
                await self._decisions.confirm(state, action, save=False)
            self._save(state)
            self.failpoints.hit("after_action_checkpoint")
            if action.outcome.status is ActionStatus.UNKNOWN:
                return await self._stop(state, StopReason.OUTCOME_UNKNOWN)
            if action.outcome.status is ActionStatus.AWAITING_APPROVAL:
                return await self._stop(state, StopReason.APPROVAL_PENDING)
        state.phase = Phase.OBSERVE
        self._save(state)
        return None

    def _observe(self, state: LoopState, stop: StopConditions) -> LoopResult | None:
        goal_met = stop.goal is not None and bool(stop.goal(state))
        state.phase = Phase.DONE if goal_met else Phase.PLAN
        self._save(state)
        self.failpoints.hit("after_observe")
        return None

    async def _verify(self, state: LoopState) -> LoopResult | None:
        request = VerifyRequest(
            goal=state.goal,
            answer=state.final_answer or "",
            actions=tuple(state.actions),
            observations=tuple(a.outcome.output for a in state.actions if a.outcome.output),
        )
        self.commit_group.barrier()  # the verifier is outside
        try:
            raw: Any = self.verifier.verify(request)
            if inspect.isawaitable(raw):
                raw = await raw
            verdict = as_verdict(raw)
        except Exception:  # a verifier that cannot answer counts as a rejection
            verdict = Verdict.reject("the verifier failed", flags=[UNPARSEABLE])
        state.verdicts.append(
            VerdictRecord(
                iteration=state.iteration,
                decision=verdict.decision.value,
                reasons=list(verdict.reasons),
                flags=list(verdict.flags),
                answer=state.final_answer or "",
            )
        )
        rejected = False
        if verdict.decision is VerdictDecision.ACCEPT:
            state.phase = Phase.DONE
        else:
            state.verifier_rejections += 1
            state.final_answer = None
            state.phase = Phase.PLAN
            limit = state.limits.max_verifier_rejections
            rejected = limit is not None and state.verifier_rejections >= limit
        self._save(state)
        self.failpoints.hit("after_verify")
        if rejected:
            return await self._stop(state, StopReason.VERIFIER_REJECTED)
        return None

    # -- helpers ---------------------------------------------------------------

    def _write_ahead(self, state: LoopState, plan: Plan) -> list[PlannedAction]:
        """Turn proposals into saved actions with their keys, before any of them runs."""
        planned: list[PlannedAction] = []
        for index, proposal in enumerate(plan.actions, start=1):
            arguments = dict(proposal.arguments) if isinstance(proposal.arguments, Mapping) else {}
            tool = self.gateway.tool(proposal.tool)
            planned.append(
                PlannedAction(
                    action_id=f"{state.iteration}-{index}",
                    iteration=state.iteration,
                    tool=str(proposal.tool),
                    arguments=arguments,
                    idempotency_key=self._key(state, str(proposal.tool), arguments),
                    rationale=str(proposal.rationale),
                    side_effect=tool.side_effect if tool else None,
                )
            )
        return planned

    def _key(self, state: LoopState, tool: str, arguments: dict[str, Any]) -> str:
        """Same call in the same run, same key; a fresh key only once the old one was abandoned.

        A completed key replays its result; an abandoned one (settled as not executed)
        must never run again, so a deliberate re-plan of that call gets the next attempt.

        Only a key this run already planned can be in the store: every key is written
        ahead in a checkpoint before anything claims it, and a key names its run. So a
        key no action of the state carries is new without asking the store (a round
        trip per planned call on a database). Were the checkpoints lost while the keys
        were kept, the old key is reused, which errs on the safe side: it replays or
        stays refused, and never runs a second time.
        """
        planned = {action.idempotency_key for action in state.actions}
        attempt = 0
        while True:
            key = derive_key(state.tenant_id, state.run_id, tool, arguments, attempt=attempt)
            if key not in planned:
                return key
            record = self.gateway.idempotency.get(state.tenant_id, key)
            if record is None or record.status is not KeyStatus.ABANDONED:
                return key
            attempt += 1

    def _account(self, state: LoopState, plan: Plan) -> bool:
        """Add the call's usage; True when a dollar budget meets an unpriced model."""
        usage = state.usage
        usage.input_tokens += plan.usage.input_tokens
        usage.output_tokens += plan.usage.output_tokens
        usage.model_calls += 1
        cost = cost_of(
            self.pricing,
            plan.usage.model or self.price_model,
            plan.usage.input_tokens,
            plan.usage.output_tokens,
        )
        if cost is not None:
            usage.dollars += cost
        return cost is None and state.limits.max_dollars is not None

    def _allowed(self, state: LoopState) -> frozenset[SideEffect]:
        """What this run may do: what it was started with, what this loop allows, and for a
        stored verification run READ only, whichever loop resumes it."""
        allowed = frozenset(state.allowed_side_effects) & self.allowed_side_effects
        if state.loop_type is LoopType.VERIFICATION:
            allowed &= READ_ONLY
        return allowed

    async def _context_items(self, state: LoopState) -> list[ContextItem]:
        items: list[ContextItem] = []
        for source in self.context:
            got = source.items(state)
            if inspect.isawaitable(got):
                got = await got
            items.extend(got)
        return items

    def _tick(self, state: LoopState) -> None:
        """Add the active time since the last tick; stopped time never reaches here."""
        now = self.clock.monotonic()
        state.usage.active_seconds += max(0.0, now - self._tick_at)
        self._tick_at = now

    def _load(self, tenant_id: str, run_id: str) -> LoopState:
        state = self.checkpoints.load(tenant_id, run_id)
        if state is None:
            raise RunNotFoundError(run_id)
        return state

    def _save(self, state: LoopState, *, active: bool = True) -> None:
        """Save a newer checkpoint; ``active=False`` for decisions made while stopped."""
        if active:
            self._tick(state)
        state.seq += 1
        state.updated_at = self.clock.now()
        self.checkpoints.save(state)

    def _audit_write(self) -> Callable[..., Any]:
        """``record`` where the store offers it (the loop never needs the event), else ``append``."""
        audit = self.audit
        if self._audit_of is None or self._audit_of[0] is not audit:
            write = audit.record if isinstance(audit, RecordingAuditLog) else audit.append
            self._audit_of = (audit, write)
        return self._audit_of[1]

    def _audit(self, state: LoopState, kind: str, actor: str | None = None, **body: Any) -> None:
        actor = actor or f"agent:{state.agent_id}"
        write = self._audit_write()
        write(state.tenant_id, actor=actor, kind=kind, body={"run_id": state.run_id, **body})
        if kind in tracing.DECISION_KINDS:
            tracing.decision(state, kind, actor, body)

    async def _stop(self, state: LoopState, reason: StopReason, error: ErrorInfo | None = None) -> LoopResult:
        state.stop_reason = reason
        state.error = error
        self._save(state)
        self._audit(
            state,
            "run.stopped",
            reason=reason.value,
            seq=state.seq,
            error=error.code if error else None,
        )
        return self._result(state, reason)

    def _result(self, state: LoopState, reason: StopReason) -> LoopResult:
        goal = reason is StopReason.GOAL_REACHED
        return LoopResult(state=state, stop_reason=reason, goal_reached=goal, resumable=is_resumable(reason))


class VerificationLoop(Loop):
    """A loop that can only read. Asking for more than READ is an error, not a warning."""

    def __init__(self, **kwargs: Any) -> None:
        allowed = kwargs.pop("allowed_side_effects", None)
        if allowed is not None and frozenset(allowed) - READ_ONLY:
            raise ConfigurationError("a verification loop may only READ")
        kwargs.pop("loop_type", None)
        super().__init__(loop_type=LoopType.VERIFICATION, allowed_side_effects=READ_ONLY, **kwargs)
