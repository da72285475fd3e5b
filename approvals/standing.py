"""Standing approvals: "approve, and approve the same from now on", scoped, bounded, expiring.

A rule names a tenant, an agent and a tool, and constrains the arguments: exactly these
(``exact_arguments``), or bounds on named fields of the tool's schema (``quantity`` at most
10, ``symbol`` equal to ``"ACME"``). It always expires, at most
``KEELGATE_STANDING_APPROVAL_MAX_DAYS`` after it is made. A rule for calls that need M
people (M-of-N) is made by M distinct people: one creates it, the others endorse it, and
only then is it live.

When a worker releases a run to wait for a person (``runs.signals.run_waiting``), each
pending approval of that run that a live rule matches is approved by the rule, in one
transaction: the inbox row is locked, then the rule's row, the rule is checked again
(live, matching these arguments, the call not high impact, enough makers who are still
members with a role that may decide it), each maker's approval is recorded through the
engine (``approval.decided`` with ``via: standing``, their note naming the rule) and
``approval.standing_used`` names the rule and who made it. A revoke locks the same rule
row, so a revoke racing a use is decided by the lock: one wins, never both.

Creating, endorsing, narrowing and revoking a rule are each one transaction with their
audit event (``approval.standing_created``, ``_endorsed``, ``_edited``, ``_revoked``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone
from pydantic import ValidationError

from approvals.models import Approval, ApprovalStatus, StandingApproval
from audit.wiring import audit_log
from keelgate.canonical import canonical_json, canonical_sha256
from keelgate.errors import DuplicateApproverError, KeelgateError
from keelgate.loop import DecisionContext
from runs.agents import load_agent
from runs.engine.loops import build_loop
from runs.services import run_requeue
from sitekit.db import unique_or_none
from sitekit.errors import NotFoundError, StandingRuleEndedError, StandingRuleInvalidError
from tenants.access import require_held_role, require_role
from tenants.models import ROLE_RANK, Membership, Role

__all__ = [
    "DEFAULT_MAX_DAYS",
    "standing_apply",
    "standing_apply_run",
    "standing_create",
    "standing_edit",
    "standing_endorse",
    "standing_matches",
    "standing_revoke",
    "standing_rules",
]

DEFAULT_MAX_DAYS = 30.0
"""The longest a rule may live where ``KEELGATE_STANDING_APPROVAL_MAX_DAYS`` is not set."""
BOUND_KEYS = frozenset({"min", "max", "equals"})
MAX_MAKERS = 10
VIA = DecisionContext(via="standing")
"""How a rule's approval reached the engine, for its ``approval.decided`` events."""


def max_days() -> float:
    """The configured longest life of a rule, in days."""
    return float(getattr(settings, "KEELGATE_STANDING_APPROVAL_MAX_DAYS", DEFAULT_MAX_DAYS))


def _invalid(field: str, why: str) -> StandingRuleInvalidError:
    return StandingRuleInvalidError(f"{field}: {why}"[:300])


# -- matching -------------------------------------------------------------------------


def standing_matches(rule: StandingApproval, arguments: Mapping[str, Any]) -> bool:
    """True if ``arguments`` are within the rule's constraints (exactly its arguments, and
    every bounded field present and within its bounds)."""
    if rule.exact_arguments is not None and canonical_json(rule.exact_arguments) != canonical_json(
        dict(arguments)
    ):
        return False
    for field, bound in (rule.bounds or {}).items():
        if field not in arguments:
            return False
        value = arguments[field]
        if "equals" in bound and canonical_json(value) != canonical_json(bound["equals"]):
            return False
        if "min" in bound or "max" in bound:
            if isinstance(value, bool) or not isinstance(value, int | float):
                return False
            if "min" in bound and value < bound["min"]:
                return False
            if "max" in bound and value > bound["max"]:
                return False
    return True


# -- validation -----------------------------------------------------------------------


def _tool_schema(agent: str, tool: str, tenant_id: str) -> tuple[Any, dict[str, Any]]:
    """The tool's arguments model and its JSON schema's properties."""
    try:
        built = load_agent(agent, tenant_id=tenant_id)
    except KeelgateError as exc:
        raise _invalid("agent", "no such agent") from exc
    found = next((t for t in built.tools if t.name == tool), None)
    if found is None:
        raise _invalid("tool", f"the agent has no tool {tool!r}")
    schema = found.arguments.model_json_schema()
    return found.arguments, dict(schema.get("properties") or {})


def _number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


def _checked_bounds(raw: Any, properties: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The bounds, each naming a field of the tool's schema, with min at most max."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise _invalid("bounds", "must be an object of field names")
    bounds: dict[str, dict[str, Any]] = {}
    for field, bound in raw.items():
        where = f"bounds.{field}"
        if field not in properties:
            raise _invalid(where, "the tool's arguments have no such field")
        if not isinstance(bound, Mapping) or not bound or set(bound) - BOUND_KEYS:
            raise _invalid(where, "give min, max or equals")
        kind = properties[field].get("type")
        for key in ("min", "max"):
            if key in bound:
                if not _number(bound[key]):
                    raise _invalid(f"{where}.{key}", "must be a number")
                if kind not in (None, "integer", "number"):
                    raise _invalid(f"{where}.{key}", f"the field is a {kind}, not a number")
        if "min" in bound and "max" in bound and bound["min"] > bound["max"]:
            raise _invalid(where, "min is above max: no call could match")
        if "equals" in bound and ("min" in bound or "max" in bound):
            raise _invalid(where, "equals with min or max: give one or the other")
        if _has_nul(bound):
            raise _invalid(where, "text may not hold NUL")
        bounds[str(field)] = dict(bound)
    return bounds


def _has_nul(value: Any) -> bool:
    """PostgreSQL cannot store NUL in a JSON value: refused as input, never a 500."""
    return "\\u0000" in canonical_json(value)


def _checked_exact(raw: Any, model: Any) -> dict[str, Any] | None:
    """Exact arguments, valid for the tool (as the edit form checks them)."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise _invalid("exact_arguments", "must be a JSON object")
    try:
        model.model_validate_json(canonical_json(dict(raw)), strict=True)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise _invalid(f"exact_arguments.{where}" if where else "exact_arguments", first["msg"]) from exc
    if _has_nul(dict(raw)):
        raise _invalid("exact_arguments", "text may not hold NUL")
    return dict(raw)


def _checked_expiry(expires_at: datetime | None, now: datetime, *, field: str = "expires_at") -> datetime:
    if expires_at is None:
        raise _invalid(field, "a standing rule must expire")
    if expires_at <= now:
        raise _invalid(field, "must be in the future")
    if expires_at > now + timedelta(days=max_days()):
        raise _invalid(field, f"at most {max_days():g} days ahead")
    return expires_at


def _audit(rule: StandingApproval, kind: str, actor: str, **body: Any) -> None:
    audit_log().append(
        rule.tenant_id,
        actor=actor,
        kind=kind,
        body={"rule_id": rule.pk, "agent": rule.agent, "tool": rule.tool, **body},
    )


def _constraints(rule: StandingApproval) -> dict[str, Any]:
    found: dict[str, Any] = {"bounds": rule.bounds or {}}
    if rule.exact_arguments is not None:
        found["exact_arguments_hash"] = canonical_sha256(rule.exact_arguments)
    return found


# -- services ---------------------------------------------------------------------------


def standing_create(
    *,
    tenant_id: str,
    user: Any,
    agent: str,
    tool: str,
    expires_at: datetime | None,
    exact_arguments: Mapping[str, Any] | None = None,
    bounds: Mapping[str, Any] | None = None,
    required: int = 1,
    note: str = "",
    source_approval: int | None = None,
    expiry_field: str = "expires_at",
    check_only: bool = False,
) -> StandingApproval | None:
    """Make a rule as ``user`` (an approver of the tenant): StandingRuleInvalidError naming the
    field for one that could never work; ``required`` > 1 waits for endorsements.
    ``check_only``: refuse as it would, make nothing (None), so that a card checks a rule
    before its approval is recorded."""
    require_role(user, tenant_id, Role.APPROVER)
    now = timezone.now()
    model, properties = _tool_schema(agent, tool, tenant_id)
    exact = _checked_exact(exact_arguments, model)
    checked = _checked_bounds(bounds, properties)
    if exact is None and not checked:
        raise _invalid("bounds", "give exact_arguments or at least one bound")
    if isinstance(required, bool) or not isinstance(required, int) or not 1 <= required <= MAX_MAKERS:
        raise _invalid("required", f"between 1 and {MAX_MAKERS}")
    expiry = _checked_expiry(expires_at, now, field=expiry_field)
    if check_only:
        return None
    by = user.get_username()
    with transaction.atomic():
        rule = StandingApproval.objects.create(
            tenant_id=tenant_id,
            agent=agent,
            tool=tool,
            exact_arguments=exact,
            bounds=checked,
            required=required,
            makers=[{"by": by, "at": now.isoformat()}],
            note=note,
            created_at=now,
            expires_at=expiry,
            source_approval=source_approval,
        )
        _audit(
            rule,
            "approval.standing_created",
            by,
            **_constraints(rule),
            required=required,
            expires_at=expiry.isoformat(),
            note=note,
            **({"approval_id": source_approval} if source_approval is not None else {}),
        )
    return rule


def standing_create_from(
    *,
    tenant_id: str,
    approval: Approval,
    user: Any,
    bounds: Mapping[str, Any] | None,
    exact: bool,
    expires_at: datetime | None,
    note: str = "",
    expiry_field: str = "expires_at",
    check_only: bool = False,
) -> StandingApproval | None:
    """A rule made from an inbox approval the person is answering: the same agent and tool,
    its M, and either its exact arguments or the given bounds. Never for a high-impact call."""
    if approval.high_impact:
        raise _invalid("approval", "a high-impact call is never approved by a standing rule")
    arguments = json.loads(approval.arguments) if exact else None
    return standing_create(
        tenant_id=tenant_id,
        user=user,
        agent=approval.agent,
        tool=approval.tool,
        expires_at=expires_at,
        exact_arguments=arguments,
        bounds=None if exact else bounds,
        required=approval.required,
        note=note,
        source_approval=approval.pk,
        expiry_field=expiry_field,
        check_only=check_only,
    )


def _locked(tenant_id: str, rule_id: int) -> StandingApproval:
    rule = unique_or_none(
        StandingApproval.objects.select_for_update().filter(tenant_id=tenant_id, pk=rule_id)
    )
    if rule is None:
        raise NotFoundError()
    return rule


def standing_endorse(*, tenant_id: str, rule_id: int, user: Any) -> StandingApproval:
    """Add ``user`` (an approver) as one more maker of a rule that needs several."""
    require_role(user, tenant_id, Role.APPROVER)
    by = user.get_username()
    with transaction.atomic():
        rule = _locked(tenant_id, rule_id)
        if rule.revoked_at is not None or rule.expires_at <= timezone.now():
            raise StandingRuleEndedError(str(rule.pk))
        if by in rule.maker_names:
            raise DuplicateApproverError(by)
        if len(rule.maker_names) >= rule.required:
            raise _invalid("required", "the rule already has all the makers it needs")
        rule.makers = [*rule.makers, {"by": by, "at": timezone.now().isoformat()}]
        rule.save(update_fields=["makers"])
        _audit(rule, "approval.standing_endorsed", by, makers=rule.maker_names, required=rule.required)
    return rule


def standing_edit(
    *,
    tenant_id: str,
    rule_id: int,
    user: Any,
    expires_at: datetime | None = None,
    bounds: Mapping[str, Any] | None = None,
) -> StandingApproval:
    """Narrow a rule, as an admin: an earlier expiry, bounds within the old ones (more
    fields may be bounded, none unbounded). Anything wider is StandingRuleInvalidError."""
    require_role(user, tenant_id, Role.ADMIN)
    by = user.get_username()
    with transaction.atomic():
        rule = _locked(tenant_id, rule_id)
        now = timezone.now()
        if rule.revoked_at is not None or rule.expires_at <= now:
            raise StandingRuleEndedError(str(rule.pk))
        changed: dict[str, Any] = {}
        if expires_at is not None and expires_at != rule.expires_at:
            if expires_at > rule.expires_at:
                raise _invalid("expires_at", "an edit may only make the rule expire sooner")
            rule.expires_at = _checked_expiry(expires_at, now)
            changed["expires_at"] = expires_at.isoformat()
        if bounds is not None:
            _, properties = _tool_schema(rule.agent, rule.tool, tenant_id)
            new = _checked_bounds(bounds, properties)
            _no_wider(rule.bounds or {}, new)
            if new != (rule.bounds or {}):
                rule.bounds = new
                changed["bounds"] = new
        if changed:
            rule.save(update_fields=["expires_at", "bounds"])
            _audit(rule, "approval.standing_edited", by, **changed)
    return rule


def _no_wider(old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
    for field, bound in old.items():
        where = f"bounds.{field}"
        if field not in new:
            raise _invalid(where, "an edit may not remove a bound")
        now = new[field]
        if "equals" in bound and (
            "equals" not in now or canonical_json(now["equals"]) != canonical_json(bound["equals"])
        ):
            raise _invalid(where, "an edit may not change equals")
        if "min" in bound and ("min" not in now or now["min"] < bound["min"]):
            raise _invalid(f"{where}.min", "an edit may only raise min")
        if "max" in bound and ("max" not in now or now["max"] > bound["max"]):
            raise _invalid(f"{where}.max", "an edit may only lower max")


def standing_revoke(*, tenant_id: str, rule_id: int, user: Any, note: str = "") -> StandingApproval:
    """Revoke a rule, as an admin: from this commit on it approves nothing. Idempotent."""
    require_role(user, tenant_id, Role.ADMIN)
    by = user.get_username()
    with transaction.atomic():
        rule = _locked(tenant_id, rule_id)
        if rule.revoked_at is not None:
            return rule
        rule.revoked_at, rule.revoked_by = timezone.now(), by
        rule.save(update_fields=["revoked_at", "revoked_by"])
        _audit(rule, "approval.standing_revoked", by, note=note, uses=rule.uses)
    return rule


def standing_rules(*, tenant_ids: list[str]) -> list[StandingApproval]:
    """The tenants' rules, newest first (live, ended and revoked alike)."""
    return list(StandingApproval.objects.filter(tenant_id__in=tenant_ids).order_by("-created_at", "-pk"))


# -- use --------------------------------------------------------------------------------


def _maker_roles(tenant_id: str, names: list[str]) -> dict[str, str]:
    """Each maker's role in the tenant now (deactivated members have none)."""
    User = get_user_model()
    rows = Membership.objects.filter(
        tenant__slug=tenant_id, deactivated_at=None, user__in=User.objects.filter(username__in=names)
    ).values_list(f"user__{User.USERNAME_FIELD}", "role")
    return {str(name): str(role) for name, role in rows}


def _may_decide(approval: Approval, role: str | None) -> bool:
    return (
        role in Role.values
        and ROLE_RANK[Role(role)] >= ROLE_RANK[Role.APPROVER]
        and approval.decidable_by(role)
    )


def standing_apply(*, tenant_id: str, approval_id: int) -> StandingApproval | None:
    """Approve one pending approval by the first live rule that matches it, if any; the
    rule that did, or None (nothing changed). One transaction, the approval's row locked,
    then the rules' rows: a revoke committed before is seen, one waiting comes after."""
    now = timezone.now()
    with transaction.atomic():
        approval = unique_or_none(
            Approval.objects.select_for_update().filter(
                tenant_id=tenant_id, pk=approval_id, status=ApprovalStatus.PENDING
            )
        )
        if approval is None or approval.high_impact:
            return None
        rules = StandingApproval.objects.select_for_update().filter(
            tenant_id=tenant_id, agent=approval.agent, tool=approval.tool, revoked_at=None, expires_at__gt=now
        )
        try:
            arguments = json.loads(approval.arguments)
        except ValueError:
            return None
        for rule in rules.order_by("pk"):
            if rule.live_at(now) and standing_matches(rule, arguments):
                voters = _voters(approval, rule)
                if voters is not None:
                    _use(approval, rule, voters, now)
                    return rule
    return None


def _voters(approval: Approval, rule: StandingApproval) -> list[tuple[str, list[str]]] | None:
    """The makers whose approvals the rule records, with their roles; None when the rule
    cannot carry the call (fewer eligible makers than the call needs)."""
    if len(rule.maker_names) < approval.required:
        return None  # never bypass M-of-N: a rule for M people is made by M people
    roles = _maker_roles(approval.tenant_id, rule.maker_names)
    voted = set(approval.approved_by)
    eligible = [
        (name, require_held_role(roles[name], Role.APPROVER))
        for name in rule.maker_names
        if name not in voted and _may_decide(approval, roles.get(name))
    ]
    if len(eligible) < approval.remaining:
        return None
    return eligible[: approval.remaining]


def _use(
    approval: Approval, rule: StandingApproval, voters: list[tuple[str, list[str]]], now: datetime
) -> None:
    loop = build_loop(approval.agent, tenant_id=approval.tenant_id)
    note = f"standing rule #{rule.pk}"
    for name, roles in voters:
        loop.approve(
            approval.tenant_id,
            approval.run_id,
            approval.action_id,
            by=name,
            note=note,
            seen=approval.arguments_hash,
            roles=roles,
            context=VIA,
        )
    rule.uses += 1
    rule.last_used_at = now
    rule.save(update_fields=["uses", "last_used_at"])
    _audit(
        rule,
        "approval.standing_used",
        rule.maker_names[0],
        run_id=approval.run_id,
        action_id=approval.action_id,
        approval_id=approval.pk,
        arguments_hash=approval.arguments_hash,
        made_by=rule.maker_names,
    )
    run_requeue(tenant_id=approval.tenant_id, run_id=approval.run_id, by=note)


def standing_apply_run(*, tenant_id: str, run_id: str) -> int:
    """Apply the live rules to the run's pending approvals; how many they approved. Costs two
    queries when the tenant has no live rule for the run's calls (one if nothing waits)."""
    pending = list(
        Approval.objects.filter(
            tenant_id=tenant_id, run_id=run_id, status=ApprovalStatus.PENDING
        ).values_list("pk", "agent", "tool")
    )
    if not pending:
        return 0
    live = StandingApproval.objects.filter(
        tenant_id=tenant_id,
        agent__in={agent for _, agent, _ in pending},
        tool__in={tool for _, _, tool in pending},
        revoked_at=None,
        expires_at__gt=timezone.now(),
    )
    if not live.exists():
        return 0
    applied = 0
    for pk, _, _ in pending:
        try:
            applied += standing_apply(tenant_id=tenant_id, approval_id=pk) is not None
        except KeelgateError:  # expired meanwhile, the agent removed: it waits for people
            continue
    return applied
