"""Decisions on inbox items: approve, deny, reconcile, expire; and cancelling a run.

Each decision is one transaction: lock the inbox row, refuse if it is already settled
(naming who settled it), apply the decision through the engine (a newer checkpoint and
its audit event), and queue the run for a worker. Two people deciding at once: the row
lock makes the second wait and then see the first decision, so exactly one takes effect.

A cancel is such a decision, so it is here rather than in ``runs.services``: it withdraws
the run's waiting approvals through the engine (``Loop.cancel``, built by
``runs.engine``, which sits above ``runs.services``) and locks their inbox rows before
the run, in the order every decision takes its locks. ``runs.services`` may import
neither; the run's move to CANCELLED still goes through ``runs.services.run_move``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from django.db import transaction
from django.utils import timezone

from approvals import postgresql
from approvals.models import Approval, ApprovalStatus, UnknownOutcome
from audit.wiring import audit_log
from keelgate.errors import (
    ApprovalEscalatedError,
    ApprovalExpiredError,
    ApprovalStaleError,
    KeelgateError,
    NoteRequiredError,
    OutcomeAlreadySettledError,
    RunFinishedError,
)
from keelgate.loop import DecisionContext
from runs.agents import load_agent
from runs.agents.lookups import LookupResult, lookup_call
from runs.engine.loops import build_loop, commit_group
from runs.models import Run, RunStatus
from runs.outcomes import RunOutcome
from runs.services import run_move, run_requeue
from sitekit.commits import DjangoCommitGroup
from sitekit.db import unique_or_none
from sitekit.errors import BulkNotAllowedError, NotFoundError
from sitekit.postgresql.commits import PostgresCommitGroup
from tenants.access import require_held_role, require_role, role_in
from tenants.models import Role

Decision = Literal["approve", "deny"]


def approval_decide(
    *,
    tenant_id: str,
    approval_id: int,
    user: Any,
    decision: Decision,
    note: str = "",
    arguments: Mapping[str, Any] | None = None,
    seen: str | None = None,
    confirmed: bool = False,
    context: DecisionContext | None = None,
) -> Approval:
    """Approve or deny one pending approval as ``user``.

    ``seen`` is the hash of the arguments the person was shown (the card's, the API
    caller's, a Slack button's): other arguments are ApprovalStaleError, for a denial
    too. ``arguments`` edits the call before approving it: the answer is then the edited
    call's approval, a new row.
    ``confirmed`` is the deliberate second step a high-impact call needs. ``context``
    says how the decision came (``tenants.auditing.decision_context``), for its event.

    An approval its deadline escalated is decided only by someone with at least the
    escalation role: ApprovalEscalatedError (403 ``approval_escalated``) otherwise, also
    when the deadline passes with this very request (the escalation is kept).

    One commit group carries the decision's transaction: the lock, the checkpoint's load
    and save, the inbox row, the run's move and both audit events, the last of them sent
    with the commit.
    """
    group = commit_group()
    with group.transaction():
        locked = _lock_with_role(group, tenant_id, approval_id, user)
        if locked is None:
            raise NotFoundError()
        approval, held = locked
        roles = require_held_role(held, Role.APPROVER)
        if decision == "deny" and not note.strip():
            raise NoteRequiredError()
        by = user.get_username()
        if approval.status != ApprovalStatus.PENDING:
            raise approval.settled_error()
        if decision == "deny" and seen is not None and seen != approval.arguments_hash:
            raise ApprovalStaleError(approval.action_id)
        # The projection compares with the locked row instead of reading it again, and sets
        # on it what it writes: the answer is the row as stored, without a read back.
        loop = build_loop(approval.agent, group=group, locked=approval, tenant_id=approval.tenant_id)
        expired = False
        refused: ApprovalEscalatedError | None = None
        try:
            if decision == "approve":
                loop.approve(
                    tenant_id,
                    approval.run_id,
                    approval.action_id,
                    by=by,
                    note=note,
                    arguments=arguments,
                    seen=seen,
                    confirmed=confirmed,
                    roles=roles,
                    context=context,
                )
            else:
                loop.deny(
                    tenant_id,
                    approval.run_id,
                    approval.action_id,
                    by=by,
                    note=note,
                    roles=roles,
                    context=context,
                )
        except ApprovalExpiredError:
            # The engine has just saved the expiry (denied, audited): keep it, then say so.
            expired = True
        except ApprovalEscalatedError as exc:
            # Escalated past this person's role, maybe just now (saved, audited): keep it, refuse.
            refused = exc
        if approval.status != ApprovalStatus.PENDING:
            run_requeue(tenant_id=tenant_id, run_id=approval.run_id, by=by, group=group)
        answer: Approval = approval
        if approval.replaced_by:
            answer = Approval.objects.get(
                tenant_id=tenant_id, run_id=approval.run_id, action_id=approval.replaced_by
            )
    if expired:
        raise ApprovalExpiredError(str(approval_id))
    if refused is not None:
        raise refused
    return answer


def unknown_reconcile(
    *,
    tenant_id: str,
    item_id: int,
    user: Any,
    executed: bool,
    note: str,
    result: Mapping[str, Any] | None = None,
    context: DecisionContext | None = None,
) -> UnknownOutcome:
    """Settle an unknown outcome as executed or not, as ``user``, with a required note.

    ``result`` is what the person found downstream (executed only): the planner reads it
    as the call's output. Settled already: OutcomeAlreadySettledError naming who.
    """
    require_role(user, tenant_id, Role.RECONCILER)
    if not note.strip():
        raise NoteRequiredError()
    group = commit_group()
    with group.transaction():  # one transaction, as a decision's (approval_decide)
        item = unique_or_none(
            UnknownOutcome.objects.select_for_update().filter(tenant_id=tenant_id, pk=item_id)
        )
        if item is None:
            raise NotFoundError()
        if item.settled:
            raise OutcomeAlreadySettledError(item.settled_by)
        by = user.get_username()
        build_loop(item.agent, group=group, tenant_id=tenant_id).reconcile_now(
            tenant_id,
            item.run_id,
            item.action_id,
            executed=executed,
            by=by,
            note=note,
            result=result,
            context=context,
        )
        item.refresh_from_db()
        run_requeue(tenant_id=tenant_id, run_id=item.run_id, by=by, group=group)
    return item


def unknown_check(*, tenant_id: str, item_id: int, user: Any) -> LookupResult:
    """Ask the agent's system of record about an open unknown outcome (changes nothing).

    The person still records the decision; this only says what the lookup found, or why
    it could not tell (timed out, failed, no lookup for the tool).
    """
    require_role(user, tenant_id, Role.RECONCILER)
    item = unique_or_none(UnknownOutcome.objects.filter(tenant_id=tenant_id, pk=item_id))
    if item is None:
        raise NotFoundError()
    if item.settled:
        raise OutcomeAlreadySettledError(item.settled_by)
    try:
        arguments = json.loads(item.arguments)
    except ValueError:
        arguments = {}
    return lookup_call(
        load_agent(item.agent, tenant_id=item.tenant_id), item.tool, item.idempotency_key, arguments
    )


CANCELLABLE = (RunStatus.QUEUED, RunStatus.WAITING, RunStatus.STOPPED)
"""Statuses in which no worker holds the run: a cancel applies at once."""


def run_cancel(
    *, tenant_id: str, run_id: str, user: Any, note: str = "", context: DecisionContext | None = None
) -> Run:
    """Cancel a run as ``user``: it stops for good and its pending approvals are withdrawn.

    A run nobody drives (queued, waiting, stopped) is cancelled at once, in one
    transaction with its checkpoint, its withdrawn approvals and the audit events. A
    run a worker holds is marked: the worker stops it at the next phase boundary, and a
    WRITE already handed to its tool finishes (or becomes an unknown outcome), never
    killed mid-call. Idempotent; a finished run is RunFinishedError (409 ``run_finished``).
    """
    require_role(user, tenant_id, Role.APPROVER)
    by = user.get_username()
    how = context.fields() if context is not None else {}
    with transaction.atomic():
        # The run's inbox rows first, then the run: the order a decision takes its locks in.
        list(Approval.objects.select_for_update().filter(tenant_id=tenant_id, run_id=run_id).order_by("pk"))
        run = unique_or_none(Run.objects.select_for_update().filter(tenant_id=tenant_id, run_id=run_id))
        if run is None:
            raise NotFoundError()
        if run.status == RunStatus.CANCELLED:
            return run
        if run.status == RunStatus.DONE:
            raise RunFinishedError(run_id)
        if run.status == RunStatus.RUNNING:
            if not run.cancel_requested_by:
                Run.objects.filter(pk=run.pk).update(cancel_requested_by=by)
                audit_log().append(
                    tenant_id,
                    actor=by,
                    kind="run.cancel_requested",
                    body={"run_id": run_id, "note": note, **how},
                )
            run.refresh_from_db()
            return run
        Run.objects.filter(pk=run.pk).update(cancel_requested_by=by)  # who, for the runs list
        loop = build_loop(run.agent, tenant_id=tenant_id)
        if loop.checkpoints.load(tenant_id, run_id) is not None:
            loop.cancel(tenant_id, run_id, by=by, note=note, context=context)
        else:  # queued, never started: there is no state to stop, only the run to close
            audit_log().append(
                tenant_id,
                actor=by,
                kind="run.cancelled",
                body={"run_id": run_id, "note": note, "withdrawn": [], "withdrawn_calls": [], **how},
            )
        run_move(
            tenant_id=tenant_id,
            run_id=run_id,
            to=RunStatus.CANCELLED,
            actor=by,
            reason="cancelled",
            expect={"status__in": CANCELLABLE},
            stop_reason="cancelled",
            outcome=RunOutcome.CANCELLED,
        )
        run.refresh_from_db()
    return run


def approvals_expire() -> int:
    """Apply every deadline that passed: escalate once if the policy says so, else deny (fail closed).

    Returns how many approvals were escalated or denied. A denied call's run is queued,
    so the planner reads the denial; an escalated one keeps waiting, for its new role.
    """
    applied = 0
    due = Approval.objects.filter(status=ApprovalStatus.PENDING, expires_at__lte=timezone.now())
    for approval in due.values("pk", "tenant_id", "run_id", "action_id", "agent"):
        try:
            with transaction.atomic():
                if _lock_pending(approval["pk"]) is None:
                    continue  # decided meanwhile
                loop = build_loop(approval["agent"], tenant_id=approval["tenant_id"])
                outcome = loop.expire(approval["tenant_id"], approval["run_id"], approval["action_id"])
                if outcome == "expired":
                    run_requeue(tenant_id=approval["tenant_id"], run_id=approval["run_id"], by="expiry")
                applied += outcome is not None
        except KeelgateError:  # e.g. its agent was removed: the others still expire
            continue
    return applied


BULK_MAX = 200
"""Most approvals one bulk decision may name."""


@dataclass(frozen=True)
class BulkResult:
    """What one bulk decision did to one approval: ``status`` is the row's, or "refused"."""

    approval_id: int
    tool: str
    run_id: str
    status: str
    code: str = ""
    """The error code when nothing was applied (``already_decided``, ``bulk_not_allowed``, ...)."""
    detail: str = ""


def approvals_decide_bulk(
    *,
    tenant_ids: Iterable[str],
    choices: Mapping[int, str | None],
    user: Any,
    decision: Decision,
    note: str = "",
    context: DecisionContext | None = None,
) -> list[BulkResult]:
    """Decide each chosen approval as ``user``, each in its own transaction.

    ``choices`` maps an approval id to the arguments hash the person was shown (or
    None). Every item is its own attributed, audited decision: one failure does not undo
    the others, and the answer lists each. High-impact and M-of-N calls (four-eyes is
    M = 2) are refused (``bulk_not_allowed``, its detail saying which): each takes a
    deliberate decision of its own.
    """
    if decision == "deny" and not note.strip():
        raise NoteRequiredError()
    rows = {
        row.pk: row
        for row in Approval.objects.filter(tenant_id__in=list(tenant_ids), pk__in=list(choices)[:BULK_MAX])
    }
    results: list[BulkResult] = []
    for approval_id, seen in list(choices.items())[:BULK_MAX]:
        row = rows.get(approval_id)
        if row is None:
            results.append(BulkResult(approval_id, "", "", "refused", NotFoundError.code))
            continue
        why = bulk_refusal(row)
        if why:
            results.append(BulkResult(row.pk, row.tool, row.run_id, "refused", BulkNotAllowedError.code, why))
            continue
        try:
            decided = approval_decide(
                tenant_id=row.tenant_id,
                approval_id=row.pk,
                user=user,
                decision=decision,
                note=note,
                seen=seen,
                context=context,
            )
        except KeelgateError as exc:
            results.append(BulkResult(row.pk, row.tool, row.run_id, "refused", exc.code, exc.detail or ""))
        else:
            results.append(BulkResult(row.pk, row.tool, row.run_id, str(decided.status)))
    return results


def bulk_refusal(row: Approval) -> str:
    """Why ``row`` takes a decision of its own (empty when a bulk decision may include it)."""
    if row.high_impact:
        return "it is high impact: approving it takes a typed confirmation of its own"
    if row.required > 1:
        return f"it needs {row.required} different people to approve it, each deciding it on its own"
    return ""


def approvals_warn() -> int:
    """Give each pending approval whose deadline is near its one ``approval.expiring`` warning.

    The warning is due ``warn_before`` ahead of each deadline (``Approval.warn_at``).
    The row lock and the engine's record of the warning (in the same transaction as
    its audit event) make two sweepers, or a sweep after a crash, warn exactly once.
    Returns how many were warned.
    """
    now = timezone.now()
    warned = 0
    due = Approval.objects.filter(
        status=ApprovalStatus.PENDING, warn_at__lte=now, warned_at=None, expires_at__gt=now
    )
    for approval in due.values("pk", "tenant_id", "run_id", "action_id", "agent"):
        try:
            with transaction.atomic():
                if _lock_pending(approval["pk"]) is None:
                    continue
                loop = build_loop(approval["agent"], tenant_id=approval["tenant_id"])
                warned += loop.warn_expiring(approval["tenant_id"], approval["run_id"], approval["action_id"])
        except KeelgateError:  # e.g. its agent was removed: the others are still warned
            continue
    return warned


def _lock_with_role(
    group: DjangoCommitGroup, tenant_id: str, approval_id: int, user: Any
) -> tuple[Approval, str | None] | None:
    """The approval, locked until the transaction ends, and the caller's role in its tenant
    (None without a membership). On PostgreSQL one statement, the group's first, so that
    its ``BEGIN`` goes in its message (:func:`approvals.postgresql.lock_with_role`)."""
    if isinstance(group, PostgresCommitGroup):
        return postgresql.lock_with_role(group, tenant_id, approval_id, user)
    approval = unique_or_none(
        Approval.objects.select_for_update().filter(tenant_id=tenant_id, pk=approval_id)
    )
    if approval is None:
        return None
    return approval, role_in(user, tenant_id)


def _lock_pending(pk: int) -> Approval | None:
    """The approval, locked until the transaction ends, if it still waits."""
    return unique_or_none(Approval.objects.select_for_update().filter(pk=pk, status=ApprovalStatus.PENDING))
