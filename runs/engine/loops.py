"""Building the engine's Loop for an agent on the database stores."""

from __future__ import annotations

from collections.abc import Callable

from django.db import connection
from django.db.models import Model

from audit.store import DjangoAuditLog
from audit.wiring import audit_log
from keelgate.gateway import Gateway, Grants, SideEffect
from keelgate.loop import Loop, LoopType, StopReason
from runs.agents import Agent, load_agent
from runs.agents.lookups import LookupConfirmer
from runs.engine.fencing import Fence
from runs.engine.stores import DjangoCheckpointStore, DjangoIdempotencyStore
from runs.engine.stores_postgresql import PostgresCheckpointStore, PostgresIdempotencyStore, ServerFence
from sitekit.commits import DjangoCommitGroup
from sitekit.postgresql.commits import PostgresCommitGroup
from tenants.auditing import arguments_audited


def commit_group(fence: Fence | None = None) -> DjangoCommitGroup:
    """A new commit group on the default database, guarded by ``fence`` (a worker's lease).

    The one place that picks the PostgreSQL implementation
    (:class:`sitekit.postgresql.commits.PostgresCommitGroup`, its fence checked by the
    server) over the readable default that every other database runs.
    """
    if connection.vendor == "postgresql":
        return PostgresCommitGroup(None if fence is None else ServerFence(fence))
    return DjangoCommitGroup(fence)


def database_stores(
    fence: Fence | None = None, *, group: DjangoCommitGroup | None = None, locked: Model | None = None
) -> tuple[DjangoCheckpointStore, DjangoIdempotencyStore, DjangoAuditLog]:
    """The three stores over one commit group (``group``, else a new one), so a loop
    groups their commits; ``locked``: a row the caller holds locked in ``group``'s
    transaction, handed to what a checkpoint's save projects (``checkpoint_saved``)."""
    if group is None:
        group = commit_group(fence)
    elif fence is not None:
        raise ValueError("a fence is a new group's: the given group keeps its own")
    if isinstance(group, PostgresCommitGroup):
        return (
            PostgresCheckpointStore(group=group, locked=locked),
            PostgresIdempotencyStore(group=group),
            audit_log(group=group),
        )
    return (
        DjangoCheckpointStore(group=group, locked=locked),
        DjangoIdempotencyStore(group=group),
        audit_log(group=group),
    )


def build_loop(
    agent: Agent | str,
    *,
    fence: Fence | None = None,
    owner: str | None = None,
    should_stop: Callable[[], bool | StopReason] | None = None,
    lease_seconds: float = 300.0,
    loop_type: LoopType = LoopType.TASK,
    allowed_side_effects: frozenset[SideEffect] | None = None,
    group: DjangoCommitGroup | None = None,
    locked: Model | None = None,
    tenant_id: str | None = None,
) -> Loop:
    """The agent's loop over the database stores; ``fence`` makes every write check the lease;
    ``group``: the stores write through the caller's commit group (a decision's transaction),
    in which the caller holds ``locked`` (its approval row) locked; ``tenant_id``: the run's
    tenant, for an agent a tenant defines (``runs.agents.register_agent_source``)."""
    if isinstance(agent, str):
        agent = load_agent(agent, tenant_id=tenant_id)
    checkpoints, idempotency, audit = database_stores(fence, group=group, locked=locked)
    gateway = agent_gateway(agent, idempotency=idempotency, audit=audit, lease_seconds=lease_seconds)
    return Loop(
        planner=agent.planner,
        gateway=gateway,
        checkpoints=checkpoints,
        verifier=agent.verifier,
        stop=agent.stop,
        confirmer=agent.confirmer
        or (LookupConfirmer(agent) if agent.auto_settle and agent.lookups else None),
        owner=owner,
        should_stop=should_stop,
        loop_type=loop_type,
        allowed_side_effects=allowed_side_effects,
    )


def agent_gateway(
    agent: Agent, *, idempotency: DjangoIdempotencyStore, audit: DjangoAuditLog, lease_seconds: float
) -> Gateway:
    """The agent's tools, grants and approval policy behind one gateway (native and graph runs);
    its audit events carry a call's arguments only for the tenants of ``KEELGATE_AUDIT_ARGUMENTS``."""
    return Gateway(
        agent.tools,
        grants=Grants({agent.name: agent.grants}),
        idempotency=idempotency,
        audit=audit,
        policy=agent.policy,
        lease_seconds=lease_seconds,
        audit_arguments=arguments_audited,
    )
