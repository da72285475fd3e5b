"""Writes of the MCP gateway: registering upstreams, their tool lists, and MCP calls.

A WRITE (or PROPOSE) call becomes a run of agent ``mcp:<upstream>`` through
``runs.services.run_start``, with the run id its identity gives (docs/mcp.md): a worker
forwards it, once. A READ is forwarded here, through the engine's ``Gateway``, and audited
as the calling user's.
"""

from __future__ import annotations

import json
import os
import shlex
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast
from urllib.parse import urlsplit

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from audit.wiring import audit_log
from keelgate.audit import AuditLog
from keelgate.canonical import canonical_sha256
from keelgate.contrib.mcp import (
    IdentityError,
    UpstreamError,
    check_upstream_name,
    gateway_name,
    list_tools,
    load_policy,
    upstream_tool,
)
from keelgate.contrib.mcp import call_goal as _call_goal
from keelgate.errors import RunExistsError
from keelgate.gateway import READ_ONLY, CallContext, Gateway, Grants, SideEffect
from keelgate.idempotency import InMemoryIdempotencyStore, derive_key
from keelgate.loop import ActionOutcome, ActionStatus, PlannedAction
from mcp_gateway.agents import agent_name
from mcp_gateway.models import Upstream
from runs.models import Run
from runs.selectors import run_state
from runs.services import run_start
from sitekit.errors import NotFoundError
from tenants.auditing import arguments_audited
from tenants.models import Tenant

__all__ = [
    "UPSTREAM_REGISTERED",
    "CallOutcome",
    "call_outcome",
    "call_read",
    "call_start",
    "run_call_outcome",
    "upstream_register",
    "upstream_tools",
]


UPSTREAM_REGISTERED = "mcp.upstream_registered"


def upstream_register(
    *,
    tenant_id: str,
    name: str,
    actor: str,
    command: str = "",
    url: str = "",
    policy: Mapping[str, Any] | None = None,
    via: str = "command",
) -> tuple[Upstream, bool]:
    """Create or update the tenant's upstream ``name``; return it and whether it is new.

    The name must be usable as a tool prefix, exactly one of ``command`` and ``url`` is
    given, and the policy validates (``keelgate.contrib.mcp.load_policy``; PolicyError names
    the field). Its tool list is read again at the next listing. The command and the admin
    both register here, so each change is one ``mcp.upstream_registered`` event by
    ``actor``, in the same transaction: which upstream, how it is reached (a URL's host or
    the command's program, never its arguments, which may hold a token) and the policy's
    digest.
    """
    check_upstream_name(name)
    command, url = command.strip(), url.strip()
    if bool(command) == bool(url):
        raise IdentityError("give a command or a url, not both")
    checked = load_policy(dict(policy or {})).model_dump(mode="json", exclude_defaults=True)
    if not Tenant.objects.filter(slug=tenant_id).exists():
        raise NotFoundError()
    with transaction.atomic():
        upstream, created = Upstream.objects.select_for_update().get_or_create(
            tenant_id=tenant_id,
            name=name,
            defaults={"command": command, "url": url, "policy": checked, "created_by": actor[:150]},
        )
        if not created:
            upstream.command, upstream.url, upstream.policy = command, url, checked
            upstream.tools_listed_at = None
            upstream.save()
        audit_log().append(
            tenant_id,
            actor=actor,
            kind=UPSTREAM_REGISTERED,
            body={
                "upstream": name,
                "created": created,
                "transport": "http" if url else "stdio",
                "target": (urlsplit(url).hostname or "") if url else _program(command),
                "policy_sha256": canonical_sha256(checked),
                "via": via,
            },
        )
    return upstream, created


def _program(command: str) -> str:
    """The command's program name alone (its arguments may carry a secret)."""
    try:
        argv = shlex.split(command)
    except ValueError:
        argv = command.split()
    return os.path.basename(argv[0]) if argv else ""


async def upstream_tools(upstream: Upstream, *, refresh: bool = False) -> list[dict[str, Any]]:
    """The upstream's tools: as last listed if that is recent (``KEELGATE_MCP_TOOLS_SECONDS``),
    else listed again and stored, so a worker forwards to the tools the client saw.

    An upstream that cannot list them now answers with its stored list (empty if it never
    listed): one broken upstream hides only its own tools.
    """
    fresh_for = float(getattr(settings, "KEELGATE_MCP_TOOLS_SECONDS", 30))
    listed = upstream.tools_listed_at
    if not refresh and listed is not None and (timezone.now() - listed).total_seconds() < fresh_for:
        return list(upstream.tools)
    timeout = load_policy(upstream.policy).timeout_seconds
    try:
        tools = await list_tools(upstream.spec(), timeout=timeout)
    except UpstreamError:
        return list(upstream.tools)
    await sync_to_async(_store_tools, thread_sensitive=False)(upstream, tools)
    return tools


def _store_tools(upstream: Upstream, tools: list[dict[str, Any]]) -> None:
    now = timezone.now()
    Upstream.objects.filter(pk=upstream.pk).update(tools=tools, tools_listed_at=now)
    upstream.tools, upstream.tools_listed_at = tools, now


def call_start(
    *, tenant_id: str, user: Any, upstream: Upstream, tool: str, arguments: Mapping[str, Any], run_id: str
) -> tuple[Run, bool]:
    """Queue the run that is this call (or find it: a retry); return it and whether it is new.

    ``run_id`` is the call's identity (``keelgate.contrib.mcp.call_identity``). Needs the
    approver role, as ``POST /runs`` does.
    """
    agent, goal = agent_name(upstream.name), _call_goal(gateway_name(upstream.name, tool), arguments)
    try:
        return run_start(tenant_id=tenant_id, agent=agent, goal=goal, user=user, run_id=run_id)
    except IntegrityError:
        # The same call arrived twice at once and the other arrival created the run first.
        existing = Run.objects.filter(tenant_id=tenant_id, run_id=run_id).first()
        if existing is None:
            raise
        if (existing.agent, existing.goal) != (agent, goal):
            raise RunExistsError(run_id) from None
        return existing, False


@dataclass(frozen=True)
class CallOutcome:
    """Where a call that is a run stands, for the client."""

    kind: Literal["pending", "awaiting_approval", "done", "denied", "unknown", "abandoned", "error"]
    result: dict[str, Any] | None = None
    """The upstream's ``CallToolResult`` (done, when it returned one)."""
    by: str = ""
    note: str = ""
    code: str = ""

    @property
    def final(self) -> bool:
        """Nothing will change it without a person (or it is done)."""
        return self.kind not in ("pending", "awaiting_approval")


def call_outcome(*, tenant_id: str, run_id: str) -> CallOutcome:
    """The outcome of the call that is run ``run_id``, read from its latest checkpoint."""
    run = Run.objects.filter(tenant_id=tenant_id, run_id=run_id).first()
    if run is None:
        raise NotFoundError()
    return run_call_outcome(run)


def run_call_outcome(run: Run) -> CallOutcome:
    """The outcome of the call that is ``run``, read from its latest checkpoint."""
    state = run_state(run)
    if state is None or not state.actions:
        if run.status == "stopped" or run.status == "cancelled":
            return CallOutcome("error", code=run.error_code or run.stop_reason or run.status)
        return CallOutcome("pending")
    action = state.actions[0]
    by_id = {a.action_id: a for a in state.actions}
    while action.approval is not None and action.approval.replaced_by in by_id:
        action = by_id[action.approval.replaced_by]  # a person edited it: the edited call is the call
    return outcome_of(action.outcome, action.approval)


def outcome_of(outcome: ActionOutcome, approval: Any) -> CallOutcome:
    """What an action's outcome means for the client."""
    status = outcome.status
    if status is ActionStatus.DONE:
        result = json.loads(outcome.output) if outcome.output else None
        return CallOutcome("done", result=result, by=outcome.settled_by or "")
    if status is ActionStatus.AWAITING_APPROVAL:
        return CallOutcome("awaiting_approval")
    if status is ActionStatus.DENIED:
        by = (approval.denied_by if approval is not None else None) or ("expiry" if outcome.code else "")
        note = approval.note if approval is not None else ""
        return CallOutcome("denied", by=by or "", note=note, code=outcome.code or "")
    if status is ActionStatus.UNKNOWN:
        return CallOutcome("unknown", code=outcome.code or "")
    if status is ActionStatus.ABANDONED:
        return CallOutcome("abandoned", by=outcome.settled_by or "")
    if status is ActionStatus.ERROR:
        return CallOutcome("error", code=outcome.code or "", note=outcome.detail)
    return CallOutcome("pending")


class _CallerAudit:
    """The request's gateway events, kept until the call returned, then written as the caller's.

    The gateway writes its audit synchronously inside its async ``execute``; a web process
    must not touch the database on its event loop, so the events wait here and
    :meth:`flush` writes them in one transaction from a thread.
    """

    def __init__(self, actor: str) -> None:
        self.actor = actor
        self.events: list[tuple[str, str, dict[str, Any]]] = []

    def record(self, tenant_id: str, *, actor: str, kind: str, body: Mapping[str, Any]) -> None:
        self.events.append((tenant_id, kind, dict(body)))

    append = record

    def flush(self) -> None:
        with transaction.atomic():
            log = audit_log()
            for tenant_id, kind, body in self.events:
                log.record(tenant_id, actor=self.actor, kind=kind, body=body)
        self.events.clear()


async def call_read(
    *, tenant_id: str, actor: str, upstream: Upstream, tool: str, arguments: Mapping[str, Any], mcp_run: str
) -> ActionOutcome:
    """Forward a READ through the engine's gateway (its timeout, its ``gateway.call`` event)."""
    policy = load_policy(upstream.policy)
    name = gateway_name(upstream.name, tool)
    agent = agent_name(upstream.name)
    forwarder = upstream_tool(
        upstream.spec(),
        name=name,
        upstream_name=tool,
        side_effect=SideEffect.READ,
        timeout=policy.timeout_seconds,
    )
    audit = _CallerAudit(actor)
    gateway = Gateway(
        [forwarder],
        grants=Grants({agent: ["*"]}),
        idempotency=InMemoryIdempotencyStore(),  # a READ claims no key
        audit=cast(AuditLog, audit),
        audit_arguments=arguments_audited,
    )
    context = CallContext(
        tenant_id=tenant_id,
        run_id=mcp_run,
        agent_id=agent,
        owner=f"mcp:{os.getpid()}",
        allowed_side_effects=READ_ONLY,
    )
    action = PlannedAction(
        action_id=f"read-{uuid.uuid4().hex[:12]}",
        iteration=1,
        tool=name,
        arguments=dict(arguments),
        idempotency_key=derive_key(tenant_id, mcp_run, name, arguments),
        side_effect=SideEffect.READ,
    )
    result = await gateway.execute(context, action)
    await sync_to_async(audit.flush, thread_sensitive=False)()
    return result.outcome
