"""LangGraph graphs as Keelgate agents: the worker drives a compiled graph on the site's saver.

An agent whose ``graph`` is set is a builder: given its tools node (a
:class:`~keelgate.contrib.langgraph.GatedToolNode` over the agent's tools, grants and
policy, on the database stores), it returns the graph. The thread is the run, the
worker's fence owns it (:mod:`runs.engine.graph_saver`), and every gated call goes
through the same Gateway as a native run's.

The rest of the site knows runs by their Keelgate checkpoint (``LoopState``), so the
driver keeps one beside the graph's: after every super-step it writes a checkpoint whose
phase says where the graph is (``plan`` for the model, ``act`` for the tools) and whose
actions are the gated calls, with the pending approval or unknown outcome the graph
stopped for. That is what the runs pages, the timeline and the inbox read, and what a
decision writes to (``Loop.approve``, ``deny``, ``reconcile``, ``cancel``, unchanged);
when the run is queued again, the driver turns the decision it finds there into the
graph's ``Command(resume=...)``. A decision never re-runs anything: the graph resumes
from its checkpoint, and done calls replay from their keys.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.utils import timezone
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.types import Command

from keelgate.canonical import canonical_sha256
from keelgate.contrib.langgraph import GatedToolNode
from keelgate.gateway import Gateway
from keelgate.idempotency import derive_key
from keelgate.loop import (
    ActionOutcome,
    ActionStatus,
    ApprovalState,
    LoopResult,
    LoopState,
    Phase,
    PlannedAction,
    StopReason,
)
from runs.agents import Agent
from runs.engine.fencing import Fence
from runs.engine.graph_saver import site_saver
from runs.engine.loops import agent_gateway, database_stores

_PHASE_OF_NODE = {"tools": Phase.ACT}
"""The tools node acts; every other node (the model, routing) plans."""


async def drive_graph(
    agent: Agent,
    *,
    tenant_id: str,
    run_id: str,
    goal: str,
    as_of: datetime,
    fence: Fence | None,
    owner: str,
    should_stop: Callable[[], bool | StopReason],
    lease_seconds: float = 300.0,
) -> LoopResult:
    """Start, resume or continue the run's graph until it ends, waits for a person, or is stopped."""
    assert agent.graph is not None
    checkpoints, idempotency, audit = database_stores(fence)
    gateway = agent_gateway(agent, idempotency=idempotency, audit=audit, lease_seconds=lease_seconds)
    node = GatedToolNode(gateway, agent_id=agent.name, tenant_id=tenant_id, owner=owner)
    graph = agent.graph(node).compile(checkpointer=site_saver(tenant_id=tenant_id, fence=fence))
    config: Any = {"configurable": {"thread_id": run_id, "keelgate_owner": owner}}

    state = checkpoints.load(tenant_id, run_id)
    if state is None:
        state = LoopState(
            tenant_id=tenant_id,
            run_id=run_id,
            agent_id=agent.name,
            goal=goal,
            as_of=as_of,
            trace_id=run_id,
            created_at=timezone.now(),
        )
        _save(checkpoints, state)
        audit.append(
            tenant_id, actor=f"agent:{agent.name}", kind="run.started", body={"run_id": run_id, "graph": True}
        )

    snapshot = await graph.aget_state(config)
    start: Any
    if not snapshot.values:
        start = {"messages": [HumanMessage(goal)]}
    elif snapshot.interrupts:
        decision = _decision(state, snapshot.interrupts[0].value)
        if decision is None:  # nobody decided yet: still waiting
            return _result(state, _waiting(snapshot.interrupts[0].value))
        start = Command(resume=decision)
    elif snapshot.next:
        start = None  # a worker died mid-graph: continue from the last step
    else:
        return _result(state, StopReason.GOAL_REACHED)

    stopped: StopReason | None = None
    async for update in graph.astream(start, config, stream_mode="updates", durability="sync"):
        step = await graph.aget_state(config)
        names = [name for name in update if not name.startswith("__")]
        _mirror(
            state,
            step.values,
            step.interrupts,
            gateway,
            phase=_PHASE_OF_NODE.get(names[0], Phase.PLAN) if names else None,
        )
        _save(checkpoints, state)
        asked = should_stop()
        if asked and not step.interrupts and step.next:
            stopped = asked if isinstance(asked, StopReason) else StopReason.INTERRUPTED
            break

    final = await graph.aget_state(config)
    _mirror(state, final.values, final.interrupts, gateway, phase=None)
    if stopped is not None:
        reason = stopped
    elif final.interrupts:
        reason = _waiting(final.interrupts[0].value)
    else:
        reason = StopReason.GOAL_REACHED
        state.phase = Phase.DONE
        last = next((m for m in reversed(final.values.get("messages", [])) if isinstance(m, AIMessage)), None)
        state.final_answer = str(last.content) if last is not None else None
    state.stop_reason = reason
    _save(checkpoints, state)
    return _result(state, reason)


def _save(checkpoints: Any, state: LoopState) -> None:
    state.seq += 1
    state.updated_at = timezone.now()
    checkpoints.save(state)


def _result(state: LoopState, reason: StopReason) -> LoopResult:
    done = reason is StopReason.GOAL_REACHED
    return LoopResult(
        state=state,
        stop_reason=reason,
        goal_reached=done,
        resumable=not done and reason is not StopReason.CANCELLED,
    )


def _waiting(payload: Any) -> StopReason:
    kind = payload.get("kind") if isinstance(payload, dict) else None
    return StopReason.OUTCOME_UNKNOWN if kind == "unknown_outcome" else StopReason.APPROVAL_PENDING


# -- the Keelgate view of the graph ----------------------------------------------------------


def _mirror(state: LoopState, values: Any, interrupts: Any, gateway: Gateway, *, phase: Phase | None) -> None:
    """Bring the checkpoint's actions in line with the graph: its tool calls, answers and stop."""
    messages = values.get("messages", []) if isinstance(values, dict) else []
    turn = 0
    for message in messages:
        if isinstance(message, AIMessage) and message.tool_calls:
            turn += 1
            for call in message.tool_calls:
                if state.action(str(call["id"])) is None:
                    tool = gateway.tool(call["name"])
                    state.actions.append(
                        PlannedAction(
                            action_id=str(call["id"]),
                            iteration=turn,
                            tool=call["name"],
                            arguments=dict(call["args"]),
                            idempotency_key=derive_key(
                                state.tenant_id, state.run_id, call["name"], dict(call["args"])
                            ),
                            side_effect=None if tool is None else tool.side_effect,
                        )
                    )
        elif isinstance(message, ToolMessage):
            action = _current(state, str(message.tool_call_id))
            if action is not None and action.status in (
                ActionStatus.PENDING,
                ActionStatus.AWAITING_APPROVAL,
                ActionStatus.UNKNOWN,
            ):
                action.outcome = _answer(message, action)
    state.iteration = max(state.iteration, turn)
    if phase is not None:
        state.phase = phase
    for pending in interrupts or ():
        payload = pending.value if isinstance(pending.value, dict) else {}
        action = _current(state, str(payload.get("action_id", "")))
        if action is None:
            continue
        if payload.get("kind") == "approval" and action.approval is None:
            action.outcome = ActionOutcome(status=ActionStatus.AWAITING_APPROVAL, at=timezone.now())
            action.approval = _approval(gateway, state, action, payload)
        elif (
            payload.get("kind") == "unknown_outcome"
            and action.status is not ActionStatus.UNKNOWN
            and not action.outcome.settled_by
        ):
            action.outcome = ActionOutcome(
                status=ActionStatus.UNKNOWN,
                code=payload.get("code") or "outcome_unknown",
                detail=str(payload.get("detail") or ""),  # "in_flight": it may still run elsewhere
                at=timezone.now(),
            )


def _current(state: LoopState, action_id: str) -> PlannedAction | None:
    """The action, or the edit that replaced it (a person edited the call before approving)."""
    action = state.action(action_id)
    while action is not None and action.approval is not None and action.approval.replaced_by:
        action = state.action(action.approval.replaced_by)
    return action


def _answer(message: ToolMessage, action: PlannedAction) -> ActionOutcome:
    meta = (message.artifact or {}).get("keelgate", {}) if isinstance(message.artifact, dict) else {}
    status = ActionStatus(meta.get("status", "done" if message.status == "success" else "error"))
    return ActionOutcome(
        status=status,
        code=meta.get("code"),
        output=str(message.content) if status is ActionStatus.DONE else None,
        replayed=bool(meta.get("replayed")),
        settled_by=meta.get("settled_by") or action.outcome.settled_by,
        at=timezone.now(),
    )


def _approval(
    gateway: Gateway, state: LoopState, action: PlannedAction, payload: dict[str, Any]
) -> ApprovalState:
    now = timezone.now()
    expires_at = None
    tool = gateway.tool(action.tool)
    if tool is not None:
        try:
            requirement = gateway.policy.requirement(
                agent_id=state.agent_id, tool=tool, arguments=tool.arguments.model_validate(action.arguments)
            )
        except ValueError:
            requirement = None
        if requirement is not None and requirement.expires_after is not None:
            expires_at = now + requirement.expires_after
    return ApprovalState(
        required=int(payload.get("required") or 1),
        reason=str(payload.get("reason") or ""),
        requested_at=now,
        expires_at=expires_at,
        arguments_hash=canonical_sha256(action.arguments),
        impact=str(payload.get("impact") or ""),
        high_impact=bool(payload.get("high_impact")),
    )


def _decision(state: LoopState, payload: Any) -> dict[str, Any] | None:
    """The ``Command(resume=...)`` value a person's decision in the checkpoint stands for, or None."""
    if not isinstance(payload, dict):
        return None
    action = _current(state, str(payload.get("action_id", "")))
    if action is None:
        return None
    if payload.get("kind") == "unknown_outcome":
        if action.status not in (ActionStatus.DONE, ActionStatus.ABANDONED) or not action.outcome.settled_by:
            return None
        executed = action.status is ActionStatus.DONE
        result = json.loads(action.outcome.output) if executed and action.outcome.output else None
        return {
            "decision": "executed" if executed else "not_executed",
            "by": action.outcome.settled_by,
            "note": action.outcome.detail[:2000],
            **({"result": result} if isinstance(result, dict) else {}),
        }
    approval = action.approval
    if approval is None:
        return None
    if approval.denied_by or approval.expired or approval.withdrawn:
        return {"decision": "deny", "by": approval.denied_by or "expiry", "note": approval.note[:2000]}
    if not approval.granted:
        return None
    decision: dict[str, Any] = {
        "decision": "approve",
        "by": [v.by for v in approval.approvals],
        "note": approval.note[:2000],
    }
    if approval.edit_of:
        decision["arguments"] = dict(action.arguments)
    return decision
