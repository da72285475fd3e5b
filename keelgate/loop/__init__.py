"""Durable, budgeted agent loop with explicit stop conditions and resume.

This package is the public surface of the ``keelgate.loop`` API reference; the
implementation lives in private modules and in the sibling packages it re-exports.
"""

from keelgate._state import (
    ActionOutcome,
    ApprovalState,
    ApprovalVote,
    ErrorInfo,
    LoopLimits,
    LoopState,
    PlannedAction,
    Usage,
    VerdictRecord,
)
from keelgate._types import ActionStatus, LoopType, Phase, StopReason
from keelgate.checkpoint import (
    CheckpointStore,
    HistoryCheckpointStore,
    InMemoryCheckpointStore,
    SqliteCheckpointStore,
    default_checkpointer,
)
from keelgate.errors import (
    NotReplayableError,
    RunExistsError,
    RunNotFoundError,
    StaleCheckpointError,
)
from keelgate.loop._budget import ModelPrice, StopConditions
from keelgate.loop._context import ContextItem, ContextSource
from keelgate.loop._decisions import DecisionContext, OutcomeConfirmer
from keelgate.loop._failpoints import EXPIRY_WINDOWS, WINDOWS, Failpoints
from keelgate.loop._llm import LLMPlanner, LLMVerifier
from keelgate.loop._loop import Loop, VerificationLoop
from keelgate.loop._monitor import MonitorLoop, MonitorSummary, Schedule
from keelgate.loop._planner import (
    ContextMessage,
    ModelUsage,
    Plan,
    Planner,
    PlanRequest,
    ProposedAction,
)
from keelgate.loop._replay import (
    Divergence,
    RecordedAction,
    RecordedStep,
    Recording,
    ReplayReport,
    diff,
    find_run,
    replay,
)
from keelgate.loop._result import LoopOutcome, LoopResult
from keelgate.loop._runner import InProcessRunner, LoopRunner, LoopSpec
from keelgate.loop._verifier import (
    AcceptAllVerifier,
    CallableVerifier,
    GroundedAnswerVerifier,
    Verdict,
    VerdictDecision,
    Verifier,
    VerifyRequest,
)

__all__ = [
    "EXPIRY_WINDOWS",
    "WINDOWS",
    "AcceptAllVerifier",
    "ActionOutcome",
    "ActionStatus",
    "ApprovalState",
    "ApprovalVote",
    "CallableVerifier",
    "CheckpointStore",
    "ContextItem",
    "ContextMessage",
    "ContextSource",
    "DecisionContext",
    "Divergence",
    "ErrorInfo",
    "Failpoints",
    "GroundedAnswerVerifier",
    "HistoryCheckpointStore",
    "InMemoryCheckpointStore",
    "InProcessRunner",
    "LLMPlanner",
    "LLMVerifier",
    "Loop",
    "LoopLimits",
    "LoopOutcome",
    "LoopResult",
    "LoopRunner",
    "LoopSpec",
    "LoopState",
    "LoopType",
    "ModelPrice",
    "ModelUsage",
    "MonitorLoop",
    "MonitorSummary",
    "NotReplayableError",
    "OutcomeConfirmer",
    "Phase",
    "Plan",
    "PlanRequest",
    "PlannedAction",
    "Planner",
    "ProposedAction",
    "RecordedAction",
    "RecordedStep",
    "Recording",
    "ReplayReport",
    "RunExistsError",
    "RunNotFoundError",
    "Schedule",
    "SqliteCheckpointStore",
    "StaleCheckpointError",
    "StopConditions",
    "StopReason",
    "Usage",
    "Verdict",
    "VerdictDecision",
    "VerdictRecord",
    "VerificationLoop",
    "Verifier",
    "VerifyRequest",
    "default_checkpointer",
    "diff",
    "find_run",
    "replay",
]
