"""Keelgate's one exception hierarchy.

Every error has a stable ``code`` and a fixed-wording ``message``: the code is what
programs compare, the wording is what people read, and neither ever contains
untrusted text (tool output, arguments). An error stored in a checkpoint is stored as
its code and detail, and :func:`error_from_code` turns it back into the same class.

Each class also says how a request-serving front end answers it (``http_status``,
inherited along the tree; the number in brackets below). ``None`` means the error is
not the caller's doing: reaching a request with it is a bug, answered 500. The Django
site adds its own errors beside these, in one tree of their own (``sitekit.errors``).

::

    BaseException
    ├── ControlSignal                  not an error: must not be swallowed by a tool
    │   └── CrashFailpoint             a test crashing the loop at a named window
    └── Exception
        └── KeelgateError              code, message
            ├── ConfigurationError             configuration_invalid
            ├── StoreError                     store_error
            │   ├── StaleCheckpointError       stale_checkpoint [409]
            │   ├── KeyNotOwnedError           key_not_owned
            │   ├── LeaseLostError             lease_lost [409]
            │   │   └── StaleOwnerError        stale_owner
            │   ├── CheckpointUnreadableError  checkpoint_unreadable
            │   └── ChainBrokenError           audit_chain_broken [409]
            ├── RunError                       run_error [409]
            │   ├── RunExistsError             run_exists
            │   ├── RunNotFoundError           run_not_found [404]
            │   ├── ActionNotFoundError        action_not_found [404]
            │   ├── NotReconcilableError       not_reconcilable
            │   ├── CallMayBeRunningError      call_may_be_running
            │   ├── ApprovalError              approval_invalid
            │   │   ├── AlreadyDecidedError    approval_already_decided
            │   │   │   └── OutcomeAlreadySettledError outcome_already_settled
            │   │   ├── DuplicateApproverError approval_duplicate_approver
            │   │   ├── ApprovalExpiredError   approval_expired
            │   │   ├── ApprovalEscalatedError approval_escalated [403]
            │   │   ├── ApproverRoleError      approval_role_required [403]
            │   │   ├── ApprovalStaleError     approval_stale
            │   │   ├── EditInvalidError       edited_arguments_invalid [422]
            │   │   ├── ConfirmationRequiredError high_impact_confirmation_required [422]
            │   │   └── NoteRequiredError      note_required [422]
            │   ├── InvalidResultError         result_invalid [422]
            │   ├── DecisionInvalidError       decision_invalid [422]
            │   ├── RunCancelledError          run_cancelled
            │   ├── RunFinishedError           run_finished
            │   └── NotReplayableError         not_replayable
            ├── PlannerError                   planner_invalid
            ├── VerifierError                  verifier_invalid
            └── GatewayError                   (outcome codes of one tool call)
                ├── UnknownToolError           unknown_tool
                ├── ToolNotGrantedError        tool_not_granted
                ├── SideEffectNotPermittedError side_effect_not_permitted
                ├── InvalidArgumentsError      invalid_arguments
                ├── ToolRejectedError          tool_rejected
                ├── ToolFailedError            tool_failed
                ├── ToolTimeoutError           tool_timeout
                ├── ToolOutputNotJsonError     tool_output_not_json
                ├── OutcomeUnknownError        outcome_unknown
                ├── ApprovalDeniedError        approval_denied
                └── CostUnknownError           cost_unknown
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "ActionNotFoundError",
    "AlreadyDecidedError",
    "ApprovalDeniedError",
    "ApprovalError",
    "ApprovalEscalatedError",
    "ApprovalExpiredError",
    "ApprovalStaleError",
    "ApproverRoleError",
    "CallMayBeRunningError",
    "ChainBrokenError",
    "CheckpointUnreadableError",
    "ConfigurationError",
    "ConfirmationRequiredError",
    "ControlSignal",
    "CostUnknownError",
    "CrashFailpoint",
    "DecisionInvalidError",
    "DuplicateApproverError",
    "EditInvalidError",
    "GatewayError",
    "InvalidArgumentsError",
    "InvalidResultError",
    "KeelgateError",
    "KeyNotOwnedError",
    "LeaseLostError",
    "NotReconcilableError",
    "NotReplayableError",
    "NoteRequiredError",
    "OutcomeAlreadySettledError",
    "OutcomeUnknownError",
    "PlannerError",
    "RunCancelledError",
    "RunError",
    "RunExistsError",
    "RunFinishedError",
    "RunNotFoundError",
    "SideEffectNotPermittedError",
    "StaleCheckpointError",
    "StaleOwnerError",
    "StoreError",
    "ToolFailedError",
    "ToolNotGrantedError",
    "ToolOutputNotJsonError",
    "ToolRejectedError",
    "ToolTimeoutError",
    "UnknownToolError",
    "VerifierError",
    "error_from_code",
    "message_for",
]


class ControlSignal(BaseException):
    """Control flow that a tool's ``except Exception`` must not swallow."""


class CrashFailpoint(ControlSignal):
    """Raised at a failpoint to simulate the process dying there."""

    def __init__(self, window: str, occurrence: int) -> None:
        super().__init__(f"crash at {window} (occurrence {occurrence})")
        self.window = window
        self.occurrence = occurrence


class KeelgateError(Exception):
    """Base of every Keelgate error: a stable code, fixed wording, an optional detail.

    ``detail`` is trusted text only (an id, a field name, who decided), never tool
    output or arguments.
    """

    code: ClassVar[str] = "keelgate_error"
    message: ClassVar[str] = "Keelgate could not complete the request."
    http_status: ClassVar[int | None] = None
    """How a front end answers this error; None: never the caller's doing (a 500)."""

    def __init__(self, detail: str = "") -> None:
        self.detail = detail
        super().__init__(f"{self.message} ({detail})" if detail else self.message)


class ConfigurationError(KeelgateError):
    """The harness was wired up wrongly (a programming error, not bad input)."""

    code = "configuration_invalid"
    message = "Keelgate is configured incorrectly."


class StoreError(KeelgateError):
    """A durable store refused an operation."""

    code = "store_error"
    message = "The store refused the operation."


class StaleCheckpointError(StoreError):
    """A newer checkpoint already exists: another writer got there first."""

    code = "stale_checkpoint"
    message = "A newer checkpoint already exists; another writer got there first."
    http_status = 409


class KeyNotOwnedError(StoreError):
    """An idempotency key is not in flight under this owner, so its result is refused."""

    code = "key_not_owned"
    message = "The idempotency key is not held by this owner."


class LeaseLostError(StoreError):
    """Another worker took over the run: this one's writes are fenced off."""

    code = "lease_lost"
    message = "The run's lease was taken over by another worker; this write was refused."
    http_status = 409


class StaleOwnerError(LeaseLostError):
    """A superseded owner wrote a graph thread's checkpoint or writes (langgraph#8796)."""

    code = "stale_owner"
    message = "This writer no longer owns the thread; its checkpoint write was refused."


class CheckpointUnreadableError(StoreError):
    """A stored checkpoint (or pending write) cannot be deserialised."""

    code = "checkpoint_unreadable"
    message = "A stored checkpoint cannot be read; nothing was run from it."


class ChainBrokenError(StoreError):
    """The audit chain does not verify."""

    code = "audit_chain_broken"
    message = "The audit chain is broken."
    http_status = 409


class RunError(KeelgateError):
    """A request about a run that cannot be honoured in its current state."""

    code = "run_error"
    message = "The run cannot do that now."
    http_status = 409


class RunExistsError(RunError):
    """``run`` was asked to start a run id that already has a checkpoint."""

    code = "run_exists"
    message = "A run with that id already exists."


class RunNotFoundError(RunError):
    """``resume`` found no checkpoint for that tenant and run id."""

    code = "run_not_found"
    message = "No run with that id exists."
    http_status = 404


class ActionNotFoundError(RunError):
    """The run has no action with that id."""

    code = "action_not_found"
    message = "The run has no action with that id."
    http_status = 404


class NotReconcilableError(RunError):
    """Only an action whose outcome is unknown can be reconciled."""

    code = "not_reconcilable"
    message = "Only an action whose outcome is unknown can be reconciled."


class CallMayBeRunningError(RunError):
    """The call's key is still leased: its worker may be inside the tool right now."""

    code = "call_may_be_running"
    message = "The call may still be running; settle it once its lease has expired."


class ApprovalError(RunError):
    """An approval decision that cannot be taken."""

    code = "approval_invalid"
    message = "That action is not waiting for approval."


class AlreadyDecidedError(ApprovalError):
    """Somebody settled the item first."""

    code = "approval_already_decided"
    message = "That item was already settled."


class OutcomeAlreadySettledError(AlreadyDecidedError):
    """Somebody settled the unknown outcome first; ``detail`` names who."""

    code = "outcome_already_settled"
    message = "That outcome was already settled."


class DuplicateApproverError(ApprovalError):
    """Four-eyes approval needs distinct people."""

    code = "approval_duplicate_approver"
    message = "The same person cannot approve an action twice."


class ApprovalExpiredError(ApprovalError):
    """The approval window closed; the action was denied."""

    code = "approval_expired"
    message = "The approval expired before it was decided; the action was denied."


class ApprovalEscalatedError(ApprovalError):
    """Its deadline escalated the approval to a role the decider lacks; ``detail`` names the role."""

    code = "approval_escalated"
    message = "This approval was escalated past its deadline: only its escalation role may decide it now."
    http_status = 403


class ApproverRoleError(ApprovalError):
    """The policy counts only decisions by certain roles (``approver_roles``); ``detail`` names them."""

    code = "approval_role_required"
    message = "Only a person holding one of the approval's roles may decide it."
    http_status = 403


class ApprovalStaleError(ApprovalError):
    """The approver saw other arguments than the call has: their approval is not for it."""

    code = "approval_stale"
    message = "The approval names other arguments than the call has; reload and decide again."


class EditInvalidError(ApprovalError):
    """Edited arguments that fail the tool's schema; ``detail`` names the fields."""

    code = "edited_arguments_invalid"
    message = "The edited arguments do not match the tool's schema."
    http_status = 422


class ConfirmationRequiredError(ApprovalError):
    """A high-impact call is approved only with an explicit confirmation (a deliberate second step)."""

    code = "high_impact_confirmation_required"
    message = "This call is high impact: confirm it explicitly to approve it."
    http_status = 422


class NoteRequiredError(ApprovalError):
    """A deny or a reconcile must say why."""

    code = "note_required"
    message = "A note saying why is required for this decision."
    http_status = 422


class InvalidResultError(RunError):
    """A reconcile's ``result`` is not a JSON object of bounded size (or the call was not executed)."""

    code = "result_invalid"
    message = "The recorded result must be a JSON object, and only for an executed call."
    http_status = 422


class DecisionInvalidError(RunError):
    """A graph was resumed with a decision that is not one (``detail`` names the fields)."""

    code = "decision_invalid"
    message = "The decision does not have the expected shape; nothing was run."
    http_status = 422


class RunCancelledError(RunError):
    """The run was cancelled: a call still waiting then will never run."""

    code = "run_cancelled"
    message = "The run was cancelled; this call will not run."


class RunFinishedError(RunError):
    """The run already finished (its goal was reached): there is nothing left to cancel."""

    code = "run_finished"
    message = "The run has already finished."


class NotReplayableError(RunError):
    """The recording lacks a recorded result for some action, or the run cannot be found."""

    code = "not_replayable"
    message = "The run cannot be replayed from what was recorded."


class PlannerError(KeelgateError):
    """The planner returned something that is not a plan."""

    code = "planner_invalid"
    message = "The planner returned something that is not a valid plan."


class VerifierError(KeelgateError):
    """The verifier returned something that is not a verdict (counted as a rejection)."""

    code = "verifier_invalid"
    message = "The verifier returned something that is not a verdict."


class GatewayError(KeelgateError):
    """Why one tool call did not produce a result."""

    code = "gateway_error"
    message = "The gateway refused the tool call."


class UnknownToolError(GatewayError):
    """The planner asked for a tool that is not registered."""

    code = "unknown_tool"
    message = "The planner asked for a tool that is not registered."


class ToolNotGrantedError(GatewayError):
    """The agent has no grant for the tool."""

    code = "tool_not_granted"
    message = "This agent is not granted that tool."


class SideEffectNotPermittedError(GatewayError):
    """The loop may not run tools with that side effect (a read-only loop)."""

    code = "side_effect_not_permitted"
    message = "This loop may not run tools with that side effect."


class InvalidArgumentsError(GatewayError):
    """The arguments failed the tool's schema; ``detail`` names the fields."""

    code = "invalid_arguments"
    message = "The arguments do not match the tool's schema."


class ToolRejectedError(GatewayError):
    """Raised by a tool to say the call definitely did not take effect."""

    code = "tool_rejected"
    message = "The tool refused the call; it did not take effect."


class ToolFailedError(GatewayError):
    """A READ tool raised; nothing was changed."""

    code = "tool_failed"
    message = "The tool raised an error."


class ToolTimeoutError(GatewayError):
    """The tool did not answer in time."""

    code = "tool_timeout"
    message = "The tool did not answer in time."


class ToolOutputNotJsonError(GatewayError):
    """The tool returned something that cannot be stored as JSON."""

    code = "tool_output_not_json"
    message = "The tool returned output that is not JSON."


class OutcomeUnknownError(GatewayError):
    """Nobody knows whether the call took effect; a human or a confirmer must settle it."""

    code = "outcome_unknown"
    message = "It is not known whether the call took effect; it will not be retried."


class ApprovalDeniedError(GatewayError):
    """An operator denied the call."""

    code = "approval_denied"
    message = "An operator denied the call."


class CostUnknownError(GatewayError):
    """A dollar budget is set but the model has no price."""

    code = "cost_unknown"
    message = "A dollar budget is set but the model has no known price."


def _all_subclasses(cls: type[KeelgateError]) -> list[type[KeelgateError]]:
    found: list[type[KeelgateError]] = [cls]
    for sub in cls.__subclasses__():
        found.extend(_all_subclasses(sub))
    return found


def _registry() -> dict[str, type[KeelgateError]]:
    return {cls.code: cls for cls in _all_subclasses(KeelgateError)}


def error_from_code(code: str, detail: str = "") -> KeelgateError:
    """Rebuild the error a checkpoint stored as ``code`` and ``detail``."""
    cls = _registry().get(code, KeelgateError)
    return cls(detail)


def message_for(code: str) -> str:
    """The fixed wording for a code (the base wording for an unknown code)."""
    return _registry().get(code, KeelgateError).message
