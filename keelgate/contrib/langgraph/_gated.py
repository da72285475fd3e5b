"""GatedToolNode: LangGraph's ToolNode with every call through a Keelgate Gateway.

Each tool call of the last AI message becomes a Keelgate planned action: the thread is
the run, the model's tool-call id the action id, and the idempotency key is derived as
the engine derives it (:func:`~keelgate.idempotency.derive_key` of tenant, thread, tool
and arguments). The gateway checks the grant, the side effect, the schema and the
approval policy; a WRITE claims its key durably before it runs, a completed key replays
its stored result, and a key left in flight (a process died inside the tool) is an
unknown outcome: the graph stops for a person instead of running the tool again.

A node re-runs from its start when a graph resumes, so everything before a decision
must be safe to repeat: calls already done replay from their keys, and a request for
approval is audited only on the pass that actually stops the graph.

People answer through ``Command(resume=...)`` with a :class:`GateDecision`:
``{"decision": "approve", "by": "alice"}``, ``{"decision": "deny", "by": ..., "note": ...}``,
``{"decision": "approve", "by": ..., "arguments": {...}}`` (edit, then approve), or for
an unknown outcome ``{"decision": "executed" | "not_executed", "by": ..., "result": {...}}``.
"""

from __future__ import annotations

import asyncio
import copy
import os
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from typing import Any, Literal

from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph._internal._runnable import RunnableCallable  # ToolNode's own base
from langgraph.errors import GraphInterrupt
from langgraph.types import interrupt
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from keelgate._state import ActionOutcome, ApprovalState, ApprovalVote, PlannedAction
from keelgate._types import ActionStatus, SideEffect
from keelgate.canonical import canonical_json, canonical_sha256
from keelgate.errors import (
    ConfigurationError,
    DecisionInvalidError,
    EditInvalidError,
    KeelgateError,
    KeyNotOwnedError,
)
from keelgate.gateway import ALL_SIDE_EFFECTS, CallContext, Gateway, Tool
from keelgate.gateway._gateway import call_fields
from keelgate.idempotency import KeyStatus, derive_key

__all__ = ["GateDecision", "GatedToolNode", "tool_schemas"]


class GateDecision(BaseModel):
    """What a person answers to a stopped gated call (the ``Command(resume=...)`` value)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    decision: Literal["approve", "deny", "executed", "not_executed"]
    by: str | list[str] = Field(min_length=1)
    """Who decided; several names for a call that needs several approvers."""
    note: str = Field(default="", max_length=2000)
    arguments: dict[str, Any] | None = None
    """Edit, then approve: the arguments to run instead of the proposed ones."""
    result: dict[str, Any] | None = None
    """For ``executed``: the downstream record the person found."""


def tool_schemas(tools: Sequence[Tool]) -> list[dict[str, Any]]:
    """The tools as OpenAI-style function schemas, for ``model.bind_tools(...)``."""
    return [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": t.spec().parameters,
            },
        }
        for t in tools
    ]


class GatedToolNode(RunnableCallable):
    """A drop-in for ``langgraph.prebuilt.ToolNode`` whose calls go through a Gateway.

    ::

        node = GatedToolNode(gateway, agent_id="trader", tenant_id="acme")
        builder.add_node("tools", node)
        model = model.bind_tools(node.tool_schemas)

    The tenant comes from ``tenant_id`` or the config's ``configurable["tenant_id"]``;
    the run is the config's ``thread_id``. Every call answers with a ``ToolMessage``
    (its ``artifact["keelgate"]`` says status, code, key and whether it replayed); a call
    that needs people, or whose outcome is unknown, calls LangGraph's ``interrupt()``.
    """

    def __init__(
        self,
        gateway: Gateway,
        *,
        agent_id: str,
        tenant_id: str | None = None,
        allowed_side_effects: frozenset[SideEffect] = ALL_SIDE_EFFECTS,
        owner: str | None = None,
        messages_key: str = "messages",
        name: str = "tools",
    ) -> None:
        super().__init__(self._func, self._afunc, name=name, trace=False)
        self.gateway = copy.copy(gateway)
        self._requests = _HeldRequests(gateway.audit)
        self.gateway.audit = self._requests
        self.agent_id = agent_id
        self.tenant_id = tenant_id
        self.allowed_side_effects = allowed_side_effects
        self.owner = owner or f"graph:{os.getpid()}"
        self.messages_key = messages_key

    @property
    def tool_schemas(self) -> list[dict[str, Any]]:
        """The granted tools as function schemas for the chat model."""
        return tool_schemas(
            [
                t
                for s in self.gateway.specs(self.agent_id, self.allowed_side_effects)
                if (t := self.gateway.tool(s.name))
            ]
        )

    # -- the node ---------------------------------------------------------------------

    def _func(self, input: Any, config: RunnableConfig) -> Any:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self._afunc(input, config))
        raise ConfigurationError("a sync graph step ran inside an event loop: use ainvoke")

    async def _afunc(self, input: Any, config: RunnableConfig) -> Any:
        message = self._last_ai_message(input)
        ctx = self._context(config, self._observations(input))
        out: list[ToolMessage] = []
        for call in message.tool_calls:
            out.append(
                await self._one(ctx, str(call.get("id") or ""), call["name"], dict(call.get("args") or {}))
            )
        return out if isinstance(input, list) else {self.messages_key: out}

    def _last_ai_message(self, input: Any) -> AIMessage:
        messages: Sequence[AnyMessage] = (
            input if isinstance(input, list) else input.get(self.messages_key, [])
        )
        for message in reversed(messages):
            if isinstance(message, AIMessage):
                return message
        raise ConfigurationError("GatedToolNode found no AI message with tool calls")

    def _observations(self, input: Any) -> tuple[str, ...]:
        """The READ answers so far (untrusted text): they feed a tool's ``describe`` line only."""
        messages = input if isinstance(input, list) else input.get(self.messages_key, [])
        return tuple(
            str(m.content)
            for m in messages
            if isinstance(m, ToolMessage)
            and m.status == "success"
            and (t := self.gateway.tool(str(m.name))) is not None
            and t.side_effect is SideEffect.READ
        )

    def _context(self, config: RunnableConfig, observations: tuple[str, ...] = ()) -> CallContext:
        conf = config.get("configurable", {})
        tenant_id = self.tenant_id or conf.get("tenant_id")
        run_id = conf.get("thread_id")
        if not tenant_id or not run_id:
            raise ConfigurationError("a gated call needs a tenant and a thread_id")
        return CallContext(
            tenant_id=str(tenant_id),
            run_id=str(run_id),
            agent_id=self.agent_id,
            owner=str(conf.get("keelgate_owner") or self.owner),
            allowed_side_effects=self.allowed_side_effects,
            observations=observations,
        )

    async def _one(self, ctx: CallContext, call_id: str, name: str, arguments: dict[str, Any]) -> ToolMessage:
        action = self._action(ctx, call_id, name, arguments)
        self._requests.hold()
        while True:
            result = await self.gateway.execute(ctx, action)
            status = result.outcome.status
            if status is ActionStatus.AWAITING_APPROVAL and result.approval is not None:
                action = self._decided(ctx, action, result.approval)
                continue
            if status is ActionStatus.UNKNOWN:
                return self._settled(ctx, action, result.outcome)
            return self._message(call_id, action, result.outcome)

    def _action(
        self,
        ctx: CallContext,
        call_id: str,
        name: str,
        arguments: dict[str, Any],
        approval: ApprovalState | None = None,
    ) -> PlannedAction:
        tool = self.gateway.tool(name)
        return PlannedAction(
            action_id=call_id or canonical_sha256([name, arguments])[:12],
            iteration=0,
            tool=name,
            arguments=arguments,
            idempotency_key=derive_key(ctx.tenant_id, ctx.run_id, name, arguments),
            side_effect=None if tool is None else tool.side_effect,
            approval=approval,
        )

    # -- people -----------------------------------------------------------------------

    def _ask(
        self, ctx: CallContext, action: PlannedAction, payload: dict[str, Any], kind: str
    ) -> GateDecision:
        """``interrupt()`` until a valid decision: audited on the pass that stops the graph.

        LangGraph keeps every resume value of a node, in order, and hands them out again
        when the node re-runs; so an answer that is not a decision is answered by
        stopping once more (the payload then names the error), never by raising: an
        exception would leave the bad answer first in line for every later resume.
        """
        allowed = ("approve", "deny") if kind == "approval" else ("executed", "not_executed")
        asking = payload
        while True:
            try:
                answer = interrupt(asking)
            except GraphInterrupt:
                # Recorded at the first stop for this call; a re-ask was audited then.
                self._requests.release(record=asking is payload)
                self.gateway.audit.append(
                    ctx.tenant_id,
                    actor=f"agent:{ctx.agent_id}",
                    kind="graph.interrupted",
                    body={
                        "run_id": ctx.run_id,
                        "action_id": action.action_id,
                        "tool": action.tool,
                        "why": kind,
                    },
                )
                raise
            error: KeelgateError
            try:
                decision = GateDecision.model_validate(answer)
                if decision.decision not in allowed:
                    raise DecisionInvalidError(f"decision must be one of {', '.join(allowed)}")
                if decision.arguments is not None:
                    self._check_edit(action, decision)
                return decision
            except ValidationError as exc:
                fields = sorted({".".join(str(p) for p in e["loc"]) or "(root)" for e in exc.errors()})
                error = DecisionInvalidError(", ".join(fields))
            except KeelgateError as exc:
                error = exc
            asking = {**payload, "error": error.code, "detail": error.detail}

    def _check_edit(self, action: PlannedAction, decision: GateDecision) -> None:
        tool = self.gateway.tool(action.tool)
        if decision.decision != "approve" or tool is None:
            raise EditInvalidError("arguments")
        try:
            tool.arguments.model_validate(decision.arguments)
        except ValidationError as exc:
            raise EditInvalidError(
                ", ".join(sorted({str(e["loc"][0]) for e in exc.errors() if e["loc"]}))
            ) from None

    def _decided(self, ctx: CallContext, action: PlannedAction, pending: ApprovalState) -> PlannedAction:
        """Stop for a decision on an approval; the action as decided (maybe with edited arguments)."""
        payload = {
            "kind": "approval",
            "action_id": action.action_id,
            "tool": action.tool,
            "arguments": action.arguments,
            "idempotency_key": action.idempotency_key,
            "reason": pending.reason,
            "required": pending.required,
            "impact": pending.impact,
            "high_impact": pending.high_impact,
        }
        decision = self._ask(ctx, action, payload, "approval")
        now = self.gateway.clock.now()
        people = [decision.by] if isinstance(decision.by, str) else list(decision.by)
        arguments = action.arguments
        if decision.decision == "approve" and decision.arguments is not None:
            arguments = decision.arguments
        digest = canonical_sha256(arguments)
        approval = pending.model_copy(update={"arguments_hash": digest, "requested_at": pending.requested_at})
        if decision.decision == "deny":
            approval = approval.model_copy(
                update={"denied_by": people[0], "denied_at": now, "note": decision.note}
            )
        else:
            votes = [ApprovalVote(by=p, at=now, note=decision.note, arguments_hash=digest) for p in people]
            approval = approval.model_copy(update={"approvals": votes, "note": decision.note})
            if arguments is not action.arguments:
                approval = approval.model_copy(update={"edit_of": action.action_id})
        edited = self._action(ctx, action.action_id, action.tool, arguments, approval)
        return edited

    def _settled(self, ctx: CallContext, action: PlannedAction, outcome: ActionOutcome) -> ToolMessage:
        """Unknown outcome: stop for a person, then record their verdict on the key (never re-run)."""
        payload = {
            "kind": "unknown_outcome",
            "action_id": action.action_id,
            "tool": action.tool,
            "arguments": action.arguments,
            "idempotency_key": action.idempotency_key,
            "code": outcome.code,
            "detail": outcome.detail,
        }
        record = self.gateway.idempotency.get(ctx.tenant_id, action.idempotency_key)
        if record is not None and record.status is not KeyStatus.IN_FLIGHT:
            # Settled elsewhere since (the console, a confirmer): the record is the answer.
            return self._message(action.action_id, action, _record_outcome(record.status, record.outcome))
        decision = self._ask(ctx, action, payload, "unknown_outcome")
        executed = decision.decision == "executed"
        by = decision.by if isinstance(decision.by, str) else decision.by[0]
        now = self.gateway.clock.now()
        output = canonical_json(decision.result) if executed and decision.result is not None else None
        settled = ActionOutcome(
            status=ActionStatus.DONE if executed else ActionStatus.ABANDONED,
            detail=decision.note,
            output=output,
            settled_by=by,
            at=now,
        )
        if action.side_effect is not SideEffect.READ:
            try:
                self.gateway.idempotency.settle(
                    ctx.tenant_id,
                    action.idempotency_key,
                    executed=executed,
                    by=by,
                    outcome=settled.model_dump_json() if executed else None,
                    now=now,
                )
            except KeyNotOwnedError:
                current = self.gateway.idempotency.get(ctx.tenant_id, action.idempotency_key)
                if current is not None and current.status is not KeyStatus.IN_FLIGHT:
                    settled = _record_outcome(current.status, current.outcome)
        self.gateway.audit.append(
            ctx.tenant_id,
            actor=by,
            kind="loop.reconciled",
            body={
                "run_id": ctx.run_id,
                "action_id": action.action_id,
                "tool": action.tool,
                "source": "human",
                "verdict": "executed" if executed else "not_executed",
                "note": decision.note,
                **call_fields(action.arguments, clear=self.gateway.records_arguments(ctx.tenant_id)),
            },
        )
        return self._message(action.action_id, action, settled)

    # -- answers ----------------------------------------------------------------------

    def _message(self, call_id: str, action: PlannedAction, outcome: ActionOutcome) -> ToolMessage:
        ok = outcome.status is ActionStatus.DONE
        if ok:
            content = outcome.output if outcome.output is not None else '"done"'
        else:
            content = canonical_json(
                {"error": outcome.code or outcome.status.value, "detail": outcome.detail}
            )
        return ToolMessage(
            content=content,
            tool_call_id=call_id,
            name=action.tool,
            status="success" if ok else "error",
            artifact={
                "keelgate": {
                    "status": outcome.status.value,
                    "code": outcome.code,
                    "replayed": outcome.replayed,
                    "idempotency_key": action.idempotency_key,
                    "settled_by": outcome.settled_by,
                }
            },
        )


_Held = list[tuple[str, str, str, Mapping[str, Any]]]


class _HeldRequests:
    """The gateway's audit log, holding back ``approval.requested`` until the graph really stops.

    A resumed node runs again from its start and asks the gateway again; only the pass
    that interrupts the graph records the request, so it is audited once. What is held
    belongs to the call being made (a context variable), so graphs sharing one node in
    several threads or tasks never release each other's requests.
    """

    def __init__(self, audit: Any) -> None:
        self.inner = audit
        self._held: ContextVar[_Held | None] = ContextVar(f"kg_held_{id(self)}", default=None)

    def hold(self) -> None:
        """Start holding for the current call (forgetting anything held before)."""
        self._held.set([])

    def append(self, tenant_id: str, *, actor: str, kind: str, body: Mapping[str, Any]) -> Any:
        held = self._held.get()
        if kind == "approval.requested" and held is not None:
            held.append((tenant_id, actor, kind, body))
            return None
        return self.inner.append(tenant_id, actor=actor, kind=kind, body=body)

    def record(self, tenant_id: str, *, actor: str, kind: str, body: Mapping[str, Any]) -> None:
        """``append`` for a caller that needs no event: held like it, never past the hold."""
        self.append(tenant_id, actor=actor, kind=kind, body=body)

    def release(self, *, record: bool) -> None:
        """Write what was held (``record``) or drop it."""
        held = self._held.get() or []
        if record:
            for tenant_id, actor, kind, body in held:
                self.inner.append(tenant_id, actor=actor, kind=kind, body=body)
        held.clear()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _record_outcome(status: KeyStatus, stored: str | None) -> ActionOutcome:
    if status is KeyStatus.COMPLETED and stored:
        return ActionOutcome.model_validate_json(stored).model_copy(update={"replayed": True})
    if status is KeyStatus.COMPLETED:
        return ActionOutcome(status=ActionStatus.DONE, replayed=True)
    return ActionOutcome(status=ActionStatus.ABANDONED)
