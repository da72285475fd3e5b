"""Replay: rebuild a run from its checkpoint history and run it again, in memory.

A :class:`Recording` is what a run did, step by step: the actions each plan step
proposed with their final outcomes, the final answer and the verifier's verdict.
:func:`replay` drives a fresh :class:`Loop` over in-memory stores with a planner that
proposes what was recorded, tools that return what was recorded and a verifier that
says what was recorded, then records the replay the same way and compares the two
with :func:`diff`. Nothing real runs: a call or an answer that was never recorded gets no result.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from keelgate._state import ActionOutcome, LoopLimits, LoopState, PlannedAction, VerdictRecord
from keelgate._types import ActionStatus, LoopType, SideEffect, StopReason
from keelgate.audit import InMemoryAuditLog
from keelgate.canonical import canonical_json
from keelgate.checkpoint import CheckpointStore, HistoryCheckpointStore, InMemoryCheckpointStore
from keelgate.errors import NotReplayableError, PlannerError
from keelgate.gateway import CallContext, Gateway, GatewayResult, Grants, Tool, ToolCall
from keelgate.idempotency import InMemoryIdempotencyStore
from keelgate.loop._budget import StopConditions
from keelgate.loop._failpoints import Failpoints
from keelgate.loop._loop import Loop
from keelgate.loop._planner import ModelUsage, Plan, Planner, PlanRequest, ProposedAction
from keelgate.loop._verifier import Verdict, VerdictDecision, Verifier, VerifyRequest

__all__ = [
    "Divergence",
    "RecordedAction",
    "RecordedStep",
    "Recording",
    "ReplayReport",
    "diff",
    "find_run",
    "replay",
]

NOT_RECORDED = "not_recorded"
"""The flag on a replay verdict for an answer that was never verified in the recording."""


@dataclass(frozen=True)
class RecordedAction:
    """One tool call as recorded in a run: name, arguments, final status and outcome."""

    action_id: str
    tool: str
    arguments: dict[str, Any]
    outcome: ActionOutcome
    rationale: str = ""
    side_effect: SideEffect | None = None

    @property
    def status(self) -> ActionStatus:
        """The final status (``outcome.status``)."""
        return self.outcome.status

    @property
    def output(self) -> str | None:
        """The tool output as untrusted JSON text, if any."""
        return self.outcome.output

    @property
    def has_result(self) -> bool:
        """True when the action was settled for good, so replay can serve its result."""
        return self.status.is_final


@dataclass(frozen=True)
class RecordedStep:
    """One iteration of a recorded run: the actions proposed, the final answer if any and the verdict."""

    iteration: int
    actions: tuple[RecordedAction, ...] = ()
    final_answer: str | None = None
    verdict: VerdictRecord | None = None
    input_tokens: int = 0
    output_tokens: int = 0

    def summary(self) -> str:
        """A short description: the tools called, or that it answered."""
        if self.actions:
            return "actions: " + ", ".join(a.tool for a in self.actions)
        return "final answer"


@dataclass(frozen=True)
class Recording:
    """A run rebuilt from its checkpoint history, ready to replay.

    Find one by trace id with :meth:`Recording.from_store`.
    """

    tenant_id: str
    run_id: str
    trace_id: str
    agent_id: str
    goal: str
    as_of: datetime
    loop_type: LoopType
    allowed_side_effects: frozenset[SideEffect]
    limits: LoopLimits
    steps: tuple[RecordedStep, ...]
    stop_reason: StopReason | None = None
    final_answer: str | None = None
    """The accepted final answer, if the run reached its goal by answering."""

    @classmethod
    def from_store(
        cls,
        store: CheckpointStore,
        tenant_id: str,
        *,
        trace_id: str | None = None,
        run_id: str | None = None,
    ) -> Recording:
        """Rebuild a run by trace id (or run id) from a store that keeps history.

        Raises :class:`~keelgate.errors.NotReplayableError` when the store keeps no
        history, the history was pruned (it starts after seq 1), or the run is not found
        in that tenant (or its trace id is not ``trace_id`` when both are given), and
        ValueError when neither id is given.
        """
        if trace_id is None and run_id is None:
            raise ValueError("give a trace_id or a run_id")
        if not isinstance(store, HistoryCheckpointStore):
            raise NotReplayableError("the store keeps no checkpoint history")
        if run_id is None:
            assert trace_id is not None  # checked above; narrows for the type checker
            run_id = find_run(store, tenant_id, trace_id)
            if run_id is None:
                raise NotReplayableError(f"no run with trace {trace_id}")
        history = store.history(tenant_id, run_id)
        if not history:
            raise NotReplayableError(f"no run {run_id}")
        if history[0].seq > 1:  # keelgate_prune removed the start of a finished run
            raise NotReplayableError(
                f"the history of run {run_id} was pruned: checkpoints 1 to {history[0].seq - 1} were removed"
            )
        if trace_id is not None and history[-1].trace_id != trace_id:
            raise NotReplayableError(f"run {run_id} does not carry trace {trace_id}")
        return _record(history)

    def actions(self) -> list[RecordedAction]:
        """Every recorded action, in order."""
        return [action for step in self.steps for action in step.actions]


@dataclass(frozen=True)
class Divergence:
    """One difference between a recorded run and its replay: where, what was expected and what was seen.

    ``step`` is the iteration (from 1); ``where`` names the field within it, such as
    ``actions[0].arguments``, ``final_answer``, ``verdict`` or ``step`` (a step only
    one side has).
    """

    step: int
    where: str
    expected: Any
    seen: Any

    def __str__(self) -> str:
        return f"step {self.step}, {self.where}: expected {self.expected!r}, seen {self.seen!r}"


@dataclass(frozen=True)
class ReplayReport:
    """The result of a replay: the original and replayed recordings and every divergence.

    ``identical`` is true when there is none.
    """

    original: Recording
    replayed: Recording
    divergences: list[Divergence]

    @property
    def identical(self) -> bool:
        """True when the replay did exactly what was recorded."""
        return not self.divergences


def find_run(store: CheckpointStore, tenant_id: str, trace_id: str) -> str | None:
    """The run id whose trace id is ``trace_id`` within one tenant (never across tenants).

    Uses the store's own ``find_by_trace`` when it has one; otherwise loads each of the
    tenant's runs. If several runs share the trace id, the most recently started wins.
    """
    find_by_trace = getattr(store, "find_by_trace", None)
    if callable(find_by_trace):
        found = find_by_trace(tenant_id, trace_id)
        return None if found is None else str(found)
    for run_id in reversed(store.runs(tenant_id)):
        state = store.load(tenant_id, run_id)
        if state is not None and state.tenant_id == tenant_id and state.trace_id == trace_id:
            return run_id
    return None


def diff(original: Recording, replayed: Recording) -> list[Divergence]:
    """Compare two recordings step by step and return every divergence (empty when they match).

    Per step: the tools called, their arguments, statuses, error codes and outputs,
    the final answer and the verdict's decision. Usage, timestamps, idempotency keys
    and stop reasons are not compared.
    """
    found: list[Divergence] = []
    for index in range(max(len(original.steps), len(replayed.steps))):
        step = index + 1
        expected = original.steps[index] if index < len(original.steps) else None
        seen = replayed.steps[index] if index < len(replayed.steps) else None
        if expected is None or seen is None:
            found.append(
                Divergence(
                    step,
                    "step",
                    expected.summary() if expected else None,
                    seen.summary() if seen else None,
                )
            )
            continue
        found.extend(_diff_step(step, expected, seen))
    return found


async def replay(
    recording: Recording,
    *,
    planner: Planner | None = None,
    verifier: Verifier | None = None,
) -> ReplayReport:
    """Replay a recording through a fresh loop and report any divergence.

    By default the planner proposes what each step recorded and the verifier returns
    the recorded verdict; pass ``planner`` (or ``verifier``) to see whether a changed
    model would have done the same. Tools always return the recorded result, and only
    for the exact recorded call (same action, tool and arguments); any other call gets
    an error outcome, never a real execution. The planner is shown the recorded tools
    only, with open argument schemas. The replay is bounded by the recording's number
    of steps; time and dollar budgets are not replayed.

    Raises :class:`~keelgate.errors.NotReplayableError` when an action has no final
    recorded result (pending, awaiting approval or of unknown outcome), or when no
    ``verifier`` is given and a recorded answer was never verified.
    """
    _check_replayable(recording, verifier_given=verifier is not None)
    steps = _StepTracker(planner or _RecordedPlanner(recording))
    gateway = _ReplayGateway(recording)
    store = InMemoryCheckpointStore()
    loop = Loop(
        planner=steps,
        gateway=gateway,
        checkpoints=store,
        verifier=verifier or _RecordedVerifier(recording, steps),
        stop=StopConditions(
            max_iterations=len(recording.steps),
            max_verifier_rejections=recording.limits.max_verifier_rejections,
        ),
        loop_type=recording.loop_type,
        allowed_side_effects=recording.allowed_side_effects,
        failpoints=Failpoints(),  # never the environment's crash window
    )
    await loop.run(
        goal=recording.goal,
        tenant_id=recording.tenant_id,
        agent_id=recording.agent_id,
        as_of=recording.as_of,
        run_id=recording.run_id,
        trace_id=recording.trace_id,
    )
    replayed = _record(store.history(recording.tenant_id, recording.run_id))
    return ReplayReport(original=recording, replayed=replayed, divergences=diff(recording, replayed))


# -- building a recording ----------------------------------------------------------


def _record(history: Sequence[LoopState]) -> Recording:
    """A recording from a run's checkpoints, oldest first."""
    final = history[-1]
    steps: list[RecordedStep] = []
    for iteration in range(1, final.iteration + 1):
        planned, before = _planned_at(history, iteration)
        verdicts = [v for v in final.verdicts if v.iteration == iteration]
        actions = tuple(
            RecordedAction(
                action_id=a.action_id,
                tool=a.tool,
                arguments=dict(a.arguments),
                outcome=a.outcome,
                rationale=a.rationale,
                side_effect=a.side_effect,
            )
            for a in final.actions
            if a.iteration == iteration
        )
        answer = None
        if not actions:
            answer = planned.final_answer if planned is not None else None
            if answer is None and verdicts:
                answer = verdicts[-1].answer
        used_in = used_out = 0
        if planned is not None and before is not None:
            used_in = planned.usage.input_tokens - before.usage.input_tokens
            used_out = planned.usage.output_tokens - before.usage.output_tokens
        steps.append(
            RecordedStep(
                iteration=iteration,
                actions=actions,
                final_answer=answer,
                verdict=verdicts[-1] if verdicts else None,
                input_tokens=used_in,
                output_tokens=used_out,
            )
        )
    reached = final.stop_reason is StopReason.GOAL_REACHED and final.final_answer is not None
    return Recording(
        tenant_id=final.tenant_id,
        run_id=final.run_id,
        trace_id=final.trace_id,
        agent_id=final.agent_id,
        goal=final.goal,
        as_of=final.as_of,
        loop_type=final.loop_type,
        allowed_side_effects=frozenset(final.allowed_side_effects),
        limits=final.limits,
        steps=tuple(steps),
        stop_reason=final.stop_reason,
        final_answer=final.final_answer if reached else None,
    )


def _planned_at(history: Sequence[LoopState], iteration: int) -> tuple[LoopState | None, LoopState | None]:
    """The first checkpoint of an iteration (saved right after planning it) and the one before."""
    for index, state in enumerate(history):
        if state.iteration == iteration:
            return state, history[index - 1] if index else None
    return None, None


# -- comparing ---------------------------------------------------------------------


def _diff_step(step: int, expected: RecordedStep, seen: RecordedStep) -> list[Divergence]:
    found: list[Divergence] = []
    if len(expected.actions) != len(seen.actions):
        found.append(
            Divergence(step, "actions", [a.tool for a in expected.actions], [a.tool for a in seen.actions])
        )
    for index, (want, got) in enumerate(zip(expected.actions, seen.actions, strict=False)):
        where = f"actions[{index}]"
        if want.tool != got.tool:
            found.append(Divergence(step, f"{where}.tool", want.tool, got.tool))
        if canonical_json(want.arguments) != canonical_json(got.arguments):
            found.append(Divergence(step, f"{where}.arguments", want.arguments, got.arguments))
        if want.status is not got.status:
            found.append(Divergence(step, f"{where}.status", want.status.value, got.status.value))
        if want.outcome.code != got.outcome.code:
            found.append(Divergence(step, f"{where}.code", want.outcome.code, got.outcome.code))
        if not _same_output(want.output, got.output):
            found.append(Divergence(step, f"{where}.output", want.output, got.output))
    if expected.final_answer != seen.final_answer:
        found.append(Divergence(step, "final_answer", expected.final_answer, seen.final_answer))
    want_verdict = expected.verdict.decision if expected.verdict else None
    got_verdict = seen.verdict.decision if seen.verdict else None
    if want_verdict != got_verdict:
        found.append(Divergence(step, "verdict", want_verdict, got_verdict))
    return found


def _same_output(a: str | None, b: str | None) -> bool:
    """Equal as JSON values when both parse (key order and spacing do not matter)."""
    if a is None or b is None:
        return a == b
    try:
        return bool(json.loads(a) == json.loads(b))
    except ValueError:
        return a == b


# -- the replay's doubles ------------------------------------------------------------


def _check_replayable(recording: Recording, *, verifier_given: bool) -> None:
    for action in recording.actions():
        if not action.has_result:
            raise NotReplayableError(f"action {action.action_id} has no recorded result ({action.status})")
    if not verifier_given:
        for step in recording.steps:
            if step.final_answer is not None and step.verdict is None:
                raise NotReplayableError(f"the answer of step {step.iteration} has no recorded verdict")


class _RecordedPlanner:
    """Proposes exactly what each step recorded, with the recorded usage."""

    def __init__(self, recording: Recording) -> None:
        self._steps = recording.steps

    def plan(self, request: PlanRequest) -> Plan:
        if not 1 <= request.iteration <= len(self._steps):
            raise PlannerError(f"no recorded step {request.iteration}")
        step = self._steps[request.iteration - 1]
        usage = ModelUsage(step.input_tokens, step.output_tokens)
        if step.actions:
            proposals = [ProposedAction(a.tool, dict(a.arguments), a.rationale) for a in step.actions]
            return Plan(actions=proposals, usage=usage)
        if step.final_answer is None:
            raise PlannerError(f"recorded step {request.iteration} is empty")
        return Plan(final_answer=step.final_answer, usage=usage)


class _StepTracker:
    """Wraps the replay's planner to remember which step is being verified."""

    def __init__(self, planner: Planner) -> None:
        self._planner = planner
        self.iteration = 0

    async def plan(self, request: PlanRequest) -> Plan:
        self.iteration = request.iteration
        plan = self._planner.plan(request)
        if inspect.isawaitable(plan):
            plan = await plan
        return plan


class _RecordedVerifier:
    """Returns the recorded verdict, for the recorded answer of the same step only."""

    def __init__(self, recording: Recording, steps: _StepTracker) -> None:
        self._by_step = {s.iteration: s for s in recording.steps}
        self._steps = steps

    def verify(self, request: VerifyRequest) -> Verdict:
        step = self._by_step.get(self._steps.iteration)
        record = step.verdict if step is not None else None
        if step is None or record is None or request.answer != step.final_answer:
            return Verdict.reject("no verdict was recorded for this answer", flags=[NOT_RECORDED])
        return Verdict(VerdictDecision(record.decision), tuple(record.reasons), tuple(record.flags))


class _AnyArguments(BaseModel):
    """Replay tools accept the recorded arguments as they are; the recording is the judge."""

    model_config = ConfigDict(extra="allow")


class _ReplayGateway(Gateway):
    """A gateway whose tools return recorded results, and only for the recorded call.

    A completed call with an output runs through the ordinary gateway path (grant,
    side effect, idempotency, audit) to a tool that returns the recorded output. Any
    other recorded result (a refusal, a denial, a settlement by a person) is served
    as it was recorded. A call that was never recorded gets a ``not_replayable`` error.
    """

    def __init__(self, recording: Recording) -> None:
        self._recorded = {a.action_id: a for a in recording.actions()}
        tools: dict[str, Tool] = {}
        for action in recording.actions():
            if action.side_effect is not None and action.tool not in tools:
                tools[action.tool] = Tool(action.tool, action.side_effect, _AnyArguments, self._serve)
        super().__init__(
            tools.values(),
            grants=Grants({recording.agent_id: ["*"]}),
            idempotency=InMemoryIdempotencyStore(),
            audit=InMemoryAuditLog(),
        )

    async def execute(self, ctx: CallContext, action: PlannedAction) -> GatewayResult:
        """Serve the recorded result of exactly this call, or an error outcome."""
        recorded = self._recorded.get(action.action_id)
        if (
            recorded is None
            or recorded.tool != action.tool
            or canonical_json(recorded.arguments) != canonical_json(action.arguments)
        ):
            outcome = ActionOutcome(
                status=ActionStatus.ERROR,
                code=NotReplayableError.code,
                detail=f"no recorded result for {action.action_id}",
                at=self.clock.now(),
            )
            return self._finish(ctx, action, outcome, None)
        if recorded.status is ActionStatus.DONE and recorded.output is not None and self.tool(action.tool):
            return await super().execute(ctx, action)
        return self._finish(ctx, action, recorded.outcome.model_copy(update={"at": self.clock.now()}), None)

    def _serve(self, arguments: BaseModel, call: ToolCall) -> Any:
        output = self._recorded[call.action_id].output
        return None if output is None else json.loads(output)
