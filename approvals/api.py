"""The inbox API: approvals to decide and unknown outcomes to reconcile.

Decisions go through the same services as the console (same rules, same audit events,
attributed to the key's or the session's user); each event also says how the decision
came: ``api`` with the key's id, or ``console`` for the browser's session, and from which
address (``tenants.auditing.decision_context``). Deciding an approval that is settled is
409 in words true of how it was settled: ``approval_already_decided`` naming who decided
it, ``approval_expired`` when its deadline denied it, ``approval_withdrawn`` naming who
cancelled its run (``Approval.settled_error``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Annotated, Literal

from django.http import HttpRequest
from django.utils import timezone
from ninja import Path, Query, Router

from approvals.schemas import (
    ARGUMENTS_HASH_REQUIRED,
    ApprovalOut,
    ApprovalPageOut,
    ApproveIn,
    BulkApproveIn,
    BulkApproveItemIn,
    BulkDecideOut,
    BulkDenyIn,
    BulkDenyItemIn,
    BulkResultOut,
    CancelIn,
    DenyIn,
    LookupOut,
    ReconcileIn,
    StandingCreateIn,
    StandingRevokeIn,
    StandingRuleOut,
    StandingRulesOut,
    UnknownOutcomeOut,
    UnknownOutcomePageOut,
    approval_out,
    standing_rule_out,
    unknown_outcome_out,
)
from approvals.selectors import approval_get, approval_page, unknown_outcome_get, unknown_outcome_page
from approvals.services import (
    Decision,
    approval_decide,
    approvals_decide_bulk,
    run_cancel,
    unknown_check,
    unknown_reconcile,
)
from approvals.standing import standing_create, standing_endorse, standing_revoke, standing_rules
from runs.schemas import ACTION_ID, RUN_ID, RunOut, run_out
from sitekit.api import CURSOR, MAX_ID, READ_ERRORS, WRITE_ERRORS, responses
from tenants.api_auth import API_AUTH as AUTH
from tenants.api_auth import TenantQuery, caller_of
from tenants.auditing import decision_context

router = Router(tags=["inbox"], auth=AUTH)

ApprovalIdPath = Annotated[int, Path(ge=1, le=MAX_ID, description="The approval's id.")]
Cursor = Annotated[str, Query(None, pattern=CURSOR, description="From `next_cursor`.")]
Limit = Annotated[int, Query(50, ge=1, le=200)]
ApprovalFilter = Literal["pending", "approved", "denied", "expired", "all"]


@router.get(
    "/approvals",
    response=responses({200: ApprovalPageOut}, READ_ERRORS),
    summary="List approvals",
    description="The tenant's approvals, newest first: pending ones unless `status` says otherwise.",
)
def list_approvals(
    request: HttpRequest,
    status: Annotated[ApprovalFilter, Query("pending")] = "pending",
    cursor: Cursor = None,
    limit: Limit = 50,
    tenant: TenantQuery = None,
) -> ApprovalPageOut:
    caller = caller_of(request, tenant)
    page = approval_page(
        tenant_ids=caller.tenant_ids, status=None if status == "all" else status, cursor=cursor, limit=limit
    )
    return ApprovalPageOut(items=[approval_out(row) for row in page.rows], next_cursor=page.next_cursor)


_BULK = (
    "Each item becomes its own attributed, audited decision in its own transaction: one refusal "
    "does not undo the others, and the answer lists each, in the order given (status `refused` "
    "with its code and detail). High-impact and M-of-N calls (four-eyes is M = 2) are refused "
    "with `bulk_not_allowed`, its detail saying which: decide them one at a time."
)


@router.post(
    "/approvals/bulk/approve",
    response=responses({200: BulkDecideOut}, WRITE_ERRORS),
    summary="Approve several approvals",
    description=_BULK,
)
def bulk_approve(request: HttpRequest, payload: BulkApproveIn, tenant: TenantQuery = None) -> BulkDecideOut:
    return _bulk(request, tenant, payload.items, "approve", payload.note)


@router.post(
    "/approvals/bulk/deny",
    response=responses({200: BulkDecideOut}, WRITE_ERRORS),
    summary="Deny several approvals",
    description=_BULK + " The `note` saying why is required.",
)
def bulk_deny(request: HttpRequest, payload: BulkDenyIn, tenant: TenantQuery = None) -> BulkDecideOut:
    return _bulk(request, tenant, payload.items, "deny", payload.note)


def _bulk(
    request: HttpRequest,
    tenant: str | None,
    items: Sequence[BulkApproveItemIn | BulkDenyItemIn],
    decision: Decision,
    note: str,
) -> BulkDecideOut:
    caller = caller_of(request, tenant)
    results = approvals_decide_bulk(
        tenant_ids=[caller.tenant_id],
        choices={item.id: item.arguments_hash for item in items},
        user=caller.user,
        decision=decision,
        note=note,
        context=decision_context(request),
    )
    return BulkDecideOut(
        results=[
            BulkResultOut(
                approval_id=r.approval_id,
                run_id=r.run_id,
                tool=r.tool,
                status=r.status,
                code=r.code,
                detail=r.detail,
            )
            for r in results
        ]
    )


@router.get(
    "/approvals/{approval_id}",
    response=responses({200: ApprovalOut}, READ_ERRORS),
    summary="Read an approval",
)
def get_approval(
    request: HttpRequest, approval_id: ApprovalIdPath, tenant: TenantQuery = None
) -> ApprovalOut:
    caller = caller_of(request, tenant)
    return approval_out(approval_get(tenant_ids=caller.tenant_ids, approval_id=approval_id))


_approve_route = router.post(
    "/approvals/{approval_id}/approve",
    response=responses({200: ApprovalOut}, WRITE_ERRORS),
    summary="Approve a proposed call",
    description=(
        "Your approval of the call you were shown, named by its `arguments_hash` (required "
        "unless the site sets `KEELGATE_APPROVE_WITHOUT_ARGUMENTS_HASH`): 409 `approval_stale` "
        "and nothing approved if the call has other arguments now. With `arguments` you edit "
        "the call first and the answer is the edited call's approval. The item stays pending "
        "while an M-of-N rule (four-eyes is M = 2) needs more people (`remaining`). 409 "
        "`approval_already_decided` (naming who) if someone decided it, "
        "`approval_expired` if its deadline denied it, "
        "`approval_withdrawn` (naming who) if its run was cancelled, "
        "`approval_duplicate_approver` if you already approved; 403 for a viewer, and 403 "
        "`approval_escalated` below the role its deadline escalated it to (`escalated_to`), "
        "403 `approval_role_required` without one of its `approver_roles`."
    ),
)


def _approve(
    request: HttpRequest, approval_id: int, payload: ApproveIn | None, tenant: str | None
) -> ApprovalOut:
    caller = caller_of(request, tenant)
    row = approval_decide(
        tenant_id=caller.tenant_id,
        approval_id=approval_id,
        user=caller.user,
        decision="approve",
        note=payload.note if payload is not None else "",
        arguments=payload.arguments if payload is not None else None,
        seen=payload.arguments_hash if payload is not None else None,
        confirmed=payload.confirm_high_impact if payload is not None else False,
        context=decision_context(request),
    )
    return approval_out(row)


# The body is required with the hash, and may be left out where the site relaxed it: the
# OpenAPI document says which (schemathesis holds the API to it).
if ARGUMENTS_HASH_REQUIRED:

    @_approve_route
    def approve(
        request: HttpRequest, approval_id: ApprovalIdPath, payload: ApproveIn, tenant: TenantQuery = None
    ) -> ApprovalOut:
        return _approve(request, approval_id, payload, tenant)

else:

    @_approve_route
    def approve(
        request: HttpRequest,
        approval_id: ApprovalIdPath,
        payload: ApproveIn | None = None,
        tenant: TenantQuery = None,
    ) -> ApprovalOut:
        return _approve(request, approval_id, payload, tenant)


@router.post(
    "/approvals/{approval_id}/deny",
    response=responses({200: ApprovalOut}, WRITE_ERRORS),
    summary="Deny a proposed call",
    description=(
        "Deny with a required `note` (422 `note_required` if it is blank). 409 "
        "`approval_already_decided` (naming who) if someone decided it, `approval_expired` if its "
        "deadline denied it, `approval_withdrawn` (naming who) if its run was cancelled; 403 for "
        "a viewer, and 403 "
        "`approval_escalated` below the role its deadline escalated it to (`escalated_to`), "
        "403 `approval_role_required` without one of its `approver_roles`."
    ),
)
def deny(
    request: HttpRequest, approval_id: ApprovalIdPath, payload: DenyIn, tenant: TenantQuery = None
) -> ApprovalOut:
    caller = caller_of(request, tenant)
    row = approval_decide(
        tenant_id=caller.tenant_id,
        approval_id=approval_id,
        user=caller.user,
        decision="deny",
        note=payload.note,
        context=decision_context(request),
    )
    return approval_out(row)


@router.post(
    "/runs/{run_id}/cancel",
    response=responses({200: RunOut}, WRITE_ERRORS),
    summary="Cancel a run",
    description=(
        "Stop the run for good: now if no worker holds it (its waiting approvals are withdrawn), "
        "else at its next step (a call already handed to its tool finishes or becomes an unknown "
        "outcome, never killed mid-call). Idempotent. 409 `run_finished` for a finished run; 403 "
        "for a viewer."
    ),
)
def cancel_run(
    request: HttpRequest,
    run_id: Annotated[str, Path(pattern=RUN_ID, max_length=128)],
    payload: CancelIn | None = None,
    tenant: TenantQuery = None,
) -> RunOut:
    caller = caller_of(request, tenant)
    run = run_cancel(
        tenant_id=caller.tenant_id,
        run_id=run_id,
        user=caller.user,
        note=payload.note if payload is not None else "",
        context=decision_context(request),
    )
    return run_out(run)


@router.get(
    "/unknown-outcomes",
    response=responses({200: UnknownOutcomePageOut}, READ_ERRORS),
    summary="List unknown outcomes",
    description="Calls whose outcome nobody knows, newest first: open ones unless `state` says otherwise.",
)
def list_unknown_outcomes(
    request: HttpRequest,
    state: Annotated[Literal["open", "settled", "all"], Query("open")] = "open",
    cursor: Cursor = None,
    limit: Limit = 50,
    tenant: TenantQuery = None,
) -> UnknownOutcomePageOut:
    caller = caller_of(request, tenant)
    settled = {"open": False, "settled": True, "all": None}[state]
    page = unknown_outcome_page(tenant_ids=caller.tenant_ids, settled=settled, cursor=cursor, limit=limit)
    return UnknownOutcomePageOut(
        items=[unknown_outcome_out(row) for row in page.rows], next_cursor=page.next_cursor
    )


@router.post(
    "/unknown-outcomes/{item_id}/check",
    response=responses({200: LookupOut}, WRITE_ERRORS),
    summary="Check an unknown outcome with the system of record",
    description=(
        "Ask the agent's system of record whether the call ran, by its idempotency key, as the "
        'console\'s "Check" button does (same lookup, same timeout). Changes nothing: reconcile '
        "with your own note afterwards. 409 `outcome_already_settled` (naming who) for a settled "
        "one; 404 for an unknown id or another tenant's; 403 below the reconciler role."
    ),
)
def check_unknown_outcome(
    request: HttpRequest,
    item_id: Annotated[int, Path(ge=1, le=MAX_ID, description="The unknown outcome's `id`.")],
    tenant: TenantQuery = None,
) -> LookupOut:
    caller = caller_of(request, tenant)
    found = unknown_check(tenant_id=caller.tenant_id, item_id=item_id, user=caller.user)
    return LookupOut(
        verdict=found.verdict,
        record=dict(found.record) if found.record is not None else None,
        problem=found.problem,
    )


@router.post(
    "/runs/{run_id}/actions/{action_id}/reconcile",
    response=responses({200: UnknownOutcomeOut}, WRITE_ERRORS),
    summary="Reconcile an unknown outcome",
    description=(
        "Say whether the call took effect (`executed`, a JSON boolean), with a `note` saying how "
        "you know and, if it did, optionally the `result` you found downstream (a JSON object). "
        "409 `outcome_already_settled` (naming who) if it was settled, `call_may_be_running` "
        "while its lease lasts, `not_an_unknown_outcome` (saying where it stands) for a call whose "
        "outcome is known; 422 `result_invalid` for a result on a call that did not run; "
        "403 below the reconciler role."
    ),
)
def reconcile(
    request: HttpRequest,
    run_id: Annotated[str, Path(pattern=RUN_ID, max_length=128)],
    action_id: Annotated[str, Path(pattern=ACTION_ID, max_length=64)],
    payload: ReconcileIn,
    tenant: TenantQuery = None,
) -> UnknownOutcomeOut:
    caller = caller_of(request, tenant)
    item = unknown_outcome_get(tenant_ids=caller.tenant_ids, run_id=run_id, action_id=action_id)
    item = unknown_reconcile(
        tenant_id=caller.tenant_id,
        item_id=item.pk,
        user=caller.user,
        executed=payload.executed,
        note=payload.note,
        result=payload.result,
        context=decision_context(request),
    )
    return unknown_outcome_out(item)


RuleIdPath = Annotated[int, Path(ge=1, le=MAX_ID, description="The standing rule's id.")]


@router.get(
    "/standing-approvals",
    response=responses({200: StandingRulesOut}, READ_ERRORS),
    summary="List standing approval rules",
    description="The tenant's standing rules, newest first: live, expired and revoked alike.",
)
def list_standing(request: HttpRequest, tenant: TenantQuery = None) -> StandingRulesOut:
    caller = caller_of(request, tenant)
    now = timezone.now()
    return StandingRulesOut(
        items=[standing_rule_out(r, now=now) for r in standing_rules(tenant_ids=caller.tenant_ids)]
    )


@router.post(
    "/standing-approvals",
    response=responses({200: StandingRuleOut}, WRITE_ERRORS),
    summary="Make a standing approval rule",
    description=(
        "Approve, from now on, the calls of `agent`'s `tool` within the constraints: exactly "
        "`exact_arguments`, or `bounds` on named fields of the tool's arguments. It expires after "
        "`expires_in_days` (required, at most `KEELGATE_STANDING_APPROVAL_MAX_DAYS`). A rule that "
        "could never work is 422 `standing_rule_invalid`, its detail naming the field (a field the "
        "tool does not have, `min` above `max`, an expiry too far). A rule with `required` > 1 is "
        "live once that many people made it (`/endorse`); it never approves a high-impact call, nor "
        "an M-of-N call with fewer makers than M. Approvers and above."
    ),
)
def create_standing(
    request: HttpRequest, payload: StandingCreateIn, tenant: TenantQuery = None
) -> StandingRuleOut:
    caller = caller_of(request, tenant)
    rule = standing_create(
        tenant_id=caller.tenant_id,
        user=caller.user,
        agent=payload.agent,
        tool=payload.tool,
        exact_arguments=payload.exact_arguments,
        bounds={k: v.as_bound() for k, v in payload.bounds.items()} if payload.bounds is not None else None,
        expires_at=timezone.now() + timedelta(days=payload.expires_in_days),
        required=payload.required,
        note=payload.note,
        expiry_field="expires_in_days",
    )
    assert rule is not None  # made, not only checked
    return standing_rule_out(rule, now=timezone.now())


@router.post(
    "/standing-approvals/{rule_id}/endorse",
    response=responses({200: StandingRuleOut}, WRITE_ERRORS),
    summary="Endorse a standing approval rule",
    description=(
        "Become one more maker of a rule that needs several (`required`). 409 "
        "`approval_duplicate_approver` if you made it already, `standing_rule_ended` if it was "
        "revoked or has expired."
    ),
)
def endorse_standing(
    request: HttpRequest, rule_id: RuleIdPath, tenant: TenantQuery = None
) -> StandingRuleOut:
    caller = caller_of(request, tenant)
    rule = standing_endorse(tenant_id=caller.tenant_id, rule_id=rule_id, user=caller.user)
    return standing_rule_out(rule, now=timezone.now())


@router.post(
    "/standing-approvals/{rule_id}/revoke",
    response=responses({200: StandingRuleOut}, WRITE_ERRORS),
    summary="Revoke a standing approval rule",
    description=(
        "From this commit on the rule approves nothing. Admins only; revoking it again changes nothing."
    ),
)
def revoke_standing(
    request: HttpRequest,
    rule_id: RuleIdPath,
    payload: StandingRevokeIn | None = None,
    tenant: TenantQuery = None,
) -> StandingRuleOut:
    caller = caller_of(request, tenant)
    rule = standing_revoke(
        tenant_id=caller.tenant_id,
        rule_id=rule_id,
        user=caller.user,
        note=payload.note if payload is not None else "",
    )
    return standing_rule_out(rule, now=timezone.now())
