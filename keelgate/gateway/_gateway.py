"""The gateway: the only path from a planned action to a tool, and every decision audited.

Order of checks, each a fixed-wording outcome rather than a crash: the tool exists,
the agent holds a grant, the loop permits its side effect, the arguments pass the
schema, people approved it if the policy says so. Only then does a READ run, or a
PROPOSE / WRITE claim its idempotency key and run once.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ValidationError

from keelgate._state import ActionOutcome, ApprovalState, PlannedAction
from keelgate._types import ActionStatus, SideEffect
from keelgate.audit import AuditLog, RecordingAuditLog
from keelgate.canonical import canonical_json, canonical_sha256
from keelgate.clock import Clock, SystemClock
from keelgate.commits import CommitGroup, shared_group
from keelgate.errors import (
    ApprovalDeniedError,
    ApprovalError,
    ApprovalExpiredError,
    ConfigurationError,
    InvalidArgumentsError,
    KeelgateError,
    KeyNotOwnedError,
    OutcomeUnknownError,
    SideEffectNotPermittedError,
    ToolFailedError,
    ToolNotGrantedError,
    ToolOutputNotJsonError,
    ToolRejectedError,
    ToolTimeoutError,
    UnknownToolError,
)
from keelgate.gateway._policy import ApprovalPolicy, Grants, NoApproval
from keelgate.gateway._tools import Tool, ToolCall, ToolSpec
from keelgate.idempotency import ClaimStatus, IdempotencyRecord, IdempotencyStore

__all__ = ["Gateway", "GatewayResult"]

AuditArguments = bool | Callable[[str], bool]
"""Whether a tenant's audit events may carry a call's arguments: one answer for every
tenant, or a function of the tenant id (:attr:`Gateway.audit_arguments`)."""


def call_fields(arguments: Mapping[str, Any], *, clear: bool, impact: str = "") -> dict[str, Any]:
    """What an audit event says of the call it is about.

    Always ``arguments_hash``, the ``canonical_sha256`` of the arguments (the hash an
    approval is given for); with ``clear`` (the tenant's policy allows it) the
    ``arguments`` themselves and the tool's plain-words ``impact`` line, which is drawn
    from them. The audit chain cannot be edited afterwards, so the default is the hash.
    """
    fields: dict[str, Any] = {"arguments_hash": canonical_sha256(arguments)}
    if clear:
        fields["arguments"] = dict(arguments)
        if impact:
            fields["impact"] = impact
    return fields


@dataclass(frozen=True)
class GatewayResult:
    """The outcome of one call, and the approval state if the policy asked for people."""

    outcome: ActionOutcome
    approval: ApprovalState | None = None


@dataclass(frozen=True)
class CallContext:
    """Who is calling: the run's identity and what its loop permits."""

    tenant_id: str
    run_id: str
    agent_id: str
    owner: str
    allowed_side_effects: frozenset[SideEffect]
    observations: tuple[str, ...] = ()
    """This step's READ outputs so far (untrusted JSON text): they only feed a tool's
    ``describe`` line for a person, and never decide anything."""


class Gateway:
    """Runs planned actions through grants, side-effect limits, approvals and idempotency."""

    def __init__(
        self,
        tools: Iterable[Tool],
        *,
        grants: Grants,
        idempotency: IdempotencyStore,
        audit: AuditLog,
        policy: ApprovalPolicy | None = None,
        clock: Clock | None = None,
        lease_seconds: float = 300.0,
        lease_grace: float = 5.0,
        audit_arguments: AuditArguments = False,
    ) -> None:
        self._tools: dict[str, Tool] = {}
        for t in tools:
            if t.name in self._tools:
                raise ConfigurationError(f"tool {t.name!r} is registered twice")
            self._tools[t.name] = t
        self.grants = grants
        self.idempotency = idempotency
        self.audit = audit
        self._group_of: tuple[tuple[int, int], CommitGroup] | None = None
        self._audit_of: tuple[AuditLog, Callable[..., Any]] | None = None
        self.policy: ApprovalPolicy = policy or NoApproval()
        self.clock: Clock = clock or SystemClock()
        self.lease_seconds = lease_seconds
        """How long a claimed key counts as possibly running (its owner may be alive)."""
        self.lease_grace = lease_grace
        self.audit_arguments: AuditArguments = audit_arguments
        """Whether the audit events of a call (its request, its decisions, its run) may
        carry its arguments in the clear: True, False (the default: only their hash,
        ``arguments_hash``), or a function of the tenant id, asked at each event."""

    def records_arguments(self, tenant_id: str) -> bool:
        """True if ``tenant_id``'s audit events may carry a call's arguments (:attr:`audit_arguments`)."""
        policy = self.audit_arguments
        return bool(policy(tenant_id)) if callable(policy) else bool(policy)

    def tool(self, name: str) -> Tool | None:
        """The registered tool of that name, or None."""
        return self._tools.get(name)

    def specs(self, agent_id: str, allowed: Iterable[SideEffect]) -> list[ToolSpec]:
        """The tools this agent may be shown: granted and of a permitted side effect."""
        permitted = frozenset(allowed)
        return [
            t.spec()
            for t in self._tools.values()
            if self.grants.allows(agent_id, t.name) and t.side_effect in permitted
        ]

    async def execute(self, ctx: CallContext, action: PlannedAction) -> GatewayResult:
        """Decide and, if allowed, run one planned action. Never raises for bad input."""
        tool = self._tools.get(action.tool)
        if tool is None:
            return self._refuse(ctx, action, UnknownToolError())
        if not self.grants.allows(ctx.agent_id, tool.name):
            return self._refuse(ctx, action, ToolNotGrantedError(tool.name))
        if tool.side_effect not in ctx.allowed_side_effects:
            return self._refuse(ctx, action, SideEffectNotPermittedError(tool.side_effect.value))
        reserved = sorted(k for k in action.arguments if str(k).startswith("__keelgate_"))
        if reserved:  # a planner's marker for arguments it could not parse: never run on defaults
            return self._refuse(ctx, action, InvalidArgumentsError(", ".join(reserved)))
        try:
            arguments = tool.arguments.model_validate(action.arguments)
        except ValidationError as exc:
            fields = sorted({".".join(str(p) for p in e["loc"]) or "(root)" for e in exc.errors()})
            return self._refuse(ctx, action, InvalidArgumentsError(", ".join(fields)))

        approval = action.approval
        requirement = self.policy.requirement(agent_id=ctx.agent_id, tool=tool, arguments=arguments)
        if requirement is not None:
            now = self.clock.now()
            if approval is None:
                approval = ApprovalState(
                    required=requirement.approvers,
                    approver_roles=list(requirement.approver_roles),
                    reason=requirement.reason,
                    requested_at=now,
                    expires_at=now + requirement.expires_after if requirement.expires_after else None,
                    arguments_hash=canonical_sha256(action.arguments),
                    impact=tool.impact(arguments, ctx.observations),
                    high_impact=requirement.high_impact,
                    on_expiry=requirement.on_expiry,
                    escalate_to=requirement.escalate_to,
                    escalate_after=requirement.escalate_after,
                    warn_before=requirement.warn_before,
                )
                self._audit(
                    ctx,
                    "approval.requested",
                    action,
                    impact=approval.impact,
                    required=approval.required,
                    high_impact=approval.high_impact,
                )
            if approval.arguments_hash and approval.arguments_hash != canonical_sha256(action.arguments):
                # Approved for other arguments (an edited checkpoint): never run these on it.
                return self._finish(
                    ctx,
                    action,
                    _error(ApprovalError("the arguments are not the ones approved"), ActionStatus.DENIED),
                    approval,
                )
            if approval.denied_by is not None:
                return self._finish(
                    ctx,
                    action,
                    _error(ApprovalDeniedError(approval.note), ActionStatus.DENIED),
                    approval,
                )
            if not approval.granted:
                # Past its deadline: denied, fail closed. An escalation the policy allows is
                # applied by the loop before it calls here (the deadline is then a new one).
                if approval.expired or (approval.expires_at and now >= approval.expires_at):
                    approval = approval.model_copy(update={"expired": True})
                    self._audit(ctx, "approval.expired", action)
                    return self._finish(
                        ctx,
                        action,
                        _error(ApprovalExpiredError(), ActionStatus.DENIED),
                        approval,
                    )
                pending = ActionOutcome(status=ActionStatus.AWAITING_APPROVAL, at=now)
                return GatewayResult(pending, approval)

        if tool.side_effect is SideEffect.READ:
            outcome = await self._run_read(tool, arguments, ctx, action)
            return self._finish(ctx, action, outcome, approval)
        result = self._finish(ctx, action, await self._run_once(tool, arguments, ctx, action), approval)
        self._flush()  # what happened outside is recorded at once (key and audit), not with the next step
        return result

    async def _run_read(
        self, tool: Tool, arguments: BaseModel, ctx: CallContext, action: PlannedAction
    ) -> ActionOutcome:
        try:
            value = await self._invoke(tool, arguments, ctx, action)
        except ToolRejectedError:
            return _error(ToolRejectedError())
        except TimeoutError:
            return _error(ToolTimeoutError())
        except Exception as exc:  # a READ changed nothing, so any failure is just an error
            return _error(ToolFailedError(type(exc).__name__))
        return self._output(value)

    async def _run_once(
        self, tool: Tool, arguments: BaseModel, ctx: CallContext, action: PlannedAction
    ) -> ActionOutcome:
        """Claim the key, run at most once, store the outcome; replay a completed key."""
        now = self.clock.now()
        status, record = self.idempotency.claim(
            ctx.tenant_id,
            action.idempotency_key,
            owner=ctx.owner,
            run_id=ctx.run_id,
            action_id=action.action_id,
            now=now,
            lease_seconds=self._lease_for(tool),
        )
        if status is not ClaimStatus.CLAIMED:
            return _from_record(status, record)
        try:
            value = await self._invoke(tool, arguments, ctx, action)
        except ToolRejectedError:
            outcome = _error(ToolRejectedError())
            record = self.idempotency.settle(
                ctx.tenant_id,
                action.idempotency_key,
                executed=False,
                by=f"tool:{tool.name}",
                outcome=outcome.model_dump_json(),
                now=self.clock.now(),
            )
            return outcome.model_copy(update={"status": ActionStatus.ERROR})
        except TimeoutError:
            # It may still be running: the key stays in flight and nobody guesses.
            return _error(ToolTimeoutError(), ActionStatus.UNKNOWN)
        except Exception as exc:
            return _error(OutcomeUnknownError(type(exc).__name__), ActionStatus.UNKNOWN)
        outcome = self._output(value)
        try:
            self.idempotency.complete(
                ctx.tenant_id,
                action.idempotency_key,
                owner=ctx.owner,
                outcome=outcome.model_dump_json(),
                now=self.clock.now(),
            )
        except KeyNotOwnedError:
            # Settled by someone else while the tool ran: their record wins.
            current = self.idempotency.get(ctx.tenant_id, action.idempotency_key)
            if current is None or current.status.value == "in_flight":
                return _error(OutcomeUnknownError("key_not_owned"), ActionStatus.UNKNOWN)
            return _from_record(ClaimStatus(current.status.value), current)
        return outcome

    def _lease_for(self, tool: Tool) -> float:
        """How long the call may run: its timeout plus grace, else the gateway's lease."""
        if tool.timeout is not None:
            return min(self.lease_seconds, tool.timeout + self.lease_grace)
        return self.lease_seconds

    def _group(self) -> CommitGroup:
        """The commit group of a loop grouping this gateway's writes (keelgate.commits)."""
        ids = (id(self.idempotency), id(self.audit))
        if self._group_of is None or self._group_of[0] != ids:
            self._group_of = (ids, shared_group(self.idempotency, self.audit))
        return self._group_of[1]

    def _flush(self) -> None:
        """Make the grouped writes durable now."""
        self._group().flush()

    async def _invoke(self, tool: Tool, arguments: BaseModel, ctx: CallContext, action: PlannedAction) -> Any:
        if tool.side_effect is SideEffect.READ:
            self._group().barrier()  # outside code runs; a READ needs nothing durable first
        else:
            self._flush()  # the key claim (and all before it) is durable before the tool runs
        call = ToolCall(
            tenant_id=ctx.tenant_id,
            run_id=ctx.run_id,
            action_id=action.action_id,
            tool=tool.name,
            idempotency_key=action.idempotency_key,
        )
        if inspect.iscoroutinefunction(tool.fn):
            coro = tool.fn(arguments, call)
            return await (asyncio.wait_for(coro, tool.timeout) if tool.timeout else coro)
        if tool.timeout:
            return await asyncio.wait_for(asyncio.to_thread(tool.fn, arguments, call), tool.timeout)
        result = tool.fn(arguments, call)
        return await result if inspect.isawaitable(result) else result

    def _output(self, value: Any) -> ActionOutcome:
        try:
            text = canonical_json(value)
        except (TypeError, ValueError):
            return _error(ToolOutputNotJsonError(), at=self.clock.now())
        return ActionOutcome(status=ActionStatus.DONE, output=text, at=self.clock.now())

    def _refuse(self, ctx: CallContext, action: PlannedAction, error: KeelgateError) -> GatewayResult:
        return self._finish(ctx, action, _error(error, at=self.clock.now()), action.approval)

    def _finish(
        self,
        ctx: CallContext,
        action: PlannedAction,
        outcome: ActionOutcome,
        approval: ApprovalState | None,
    ) -> GatewayResult:
        self._audit(
            ctx,
            "gateway.call",
            action,
            status=outcome.status.value,
            code=outcome.code,
            replayed=outcome.replayed,
        )
        return GatewayResult(outcome, approval)

    def _audit_write(self) -> Callable[..., Any]:
        """``record`` where the store offers it (the gateway never needs the event), else ``append``."""
        audit = self.audit
        if self._audit_of is None or self._audit_of[0] is not audit:
            write = audit.record if isinstance(audit, RecordingAuditLog) else audit.append
            self._audit_of = (audit, write)
        return self._audit_of[1]

    def _audit(
        self, ctx: CallContext, kind: str, action: PlannedAction, *, impact: str = "", **extra: Any
    ) -> None:
        """One event about ``action``: who, which call (:func:`call_fields`), then ``extra``."""
        body: dict[str, Any] = {
            "run_id": ctx.run_id,
            "action_id": action.action_id,
            "tool": action.tool,
            "idempotency_key": action.idempotency_key,
            **call_fields(action.arguments, clear=self.records_arguments(ctx.tenant_id), impact=impact),
        }
        body.update(extra)
        write = self._audit_write()
        write(ctx.tenant_id, actor=f"agent:{ctx.agent_id}", kind=kind, body=body)


def _error(
    error: KeelgateError,
    status: ActionStatus = ActionStatus.ERROR,
    at: datetime | None = None,
) -> ActionOutcome:
    return ActionOutcome(status=status, code=error.code, detail=error.detail, at=at)


def _from_record(status: ClaimStatus, record: IdempotencyRecord) -> ActionOutcome:
    """What a key that was not freshly claimed means for the action."""
    if status is ClaimStatus.COMPLETED:
        if record.outcome:
            stored = ActionOutcome.model_validate_json(record.outcome)
            return stored.model_copy(update={"replayed": True})
        return ActionOutcome(
            status=ActionStatus.DONE,
            replayed=True,
            settled_by=record.settled_by,
            at=record.completed_at,
        )
    if status is ClaimStatus.ABANDONED:
        return ActionOutcome(
            status=ActionStatus.ABANDONED, settled_by=record.settled_by, at=record.completed_at
        )
    return _error(OutcomeUnknownError("in_flight"), ActionStatus.UNKNOWN)
