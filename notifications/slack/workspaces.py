"""A tenant's Slack workspace: registered (audited), and its credentials read from the environment.

The bot token and the signing secret live in environment variables the workspace row
names (``token_env``, ``secret_env``): never in the database, never in an audit event,
an error or a log line. :func:`bot_token` and :func:`signing_secret` read them when a
message is sent or a request checked, so a rotated token takes effect without a
migration and a dump of the database gives nobody the keys.
"""

from __future__ import annotations

import os
import re
from typing import Any

from django.db import transaction

from audit.wiring import audit_log
from notifications.channel import Subscription
from notifications.cursors import cursor_open
from notifications.models import SlackWorkspace
from tenants.models import Tenant

TEAM_ID = re.compile(r"^T[A-Z0-9]{2,31}$")
CHANNEL_ID = re.compile(r"^[CGD][A-Z0-9]{2,31}$")
ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]{0,99}$")

CHANNEL_NAME = "slack"
"""The channel's name on the seam (its cursors' key space)."""


class CredentialMissing(Exception):
    """The environment variable a workspace names is not set (the message says which, never a value)."""


def subscriber(workspace: SlackWorkspace | int) -> str:
    """The workspace's cursor key on the seam."""
    pk = workspace if isinstance(workspace, int) else workspace.pk
    return f"ws{pk}"


def bot_token(workspace: SlackWorkspace) -> str:
    """The workspace's bot token, read from its environment variable now."""
    return _env(workspace.token_env, "bot token")


def signing_secret(workspace: SlackWorkspace) -> str:
    """The workspace's signing secret, read from its environment variable now."""
    return _env(workspace.secret_env, "signing secret")


def _env(name: str, what: str) -> str:
    value = os.environ.get(name, "").strip()
    if not value:
        raise CredentialMissing(f"the {what} variable {name} is not set")
    return value


def workspace_problem(
    *, team_id: str, token_env: str, secret_env: str, channel: str, agent_channels: dict[str, str]
) -> str:
    """What is wrong with a workspace's ids and variable names, or ""."""
    if not TEAM_ID.match(team_id):
        return f"{team_id!r} is not a Slack team id (T followed by capital letters and digits)"
    for name in (token_env, secret_env):
        if not ENV_NAME.match(name):
            return f"{name!r} is not an environment variable name (A-Z, 0-9, _)"
    for target in [channel, *agent_channels.values()]:
        if not CHANNEL_ID.match(target):
            return f"{target!r} is not a Slack channel id (C0123…)"
    return ""


def workspace_register(
    *,
    tenant: Tenant,
    team_id: str,
    token_env: str,
    secret_env: str,
    channel: str,
    agent_channels: dict[str, str] | None = None,
    actor: str,
) -> tuple[SlackWorkspace, bool]:
    """Register (or change) the tenant's workspace ``team_id``; audited as ``slack.workspace_registered``.

    ValueError for a malformed id or variable name, or a team another tenant has. A new
    workspace hears of items from now on (its cursor starts at the chain's head).
    """
    agent_channels = dict(agent_channels or {})
    problem = workspace_problem(
        team_id=team_id,
        token_env=token_env,
        secret_env=secret_env,
        channel=channel,
        agent_channels=agent_channels,
    )
    if problem:
        raise ValueError(problem)
    with transaction.atomic():
        existing = SlackWorkspace.objects.select_for_update().filter(team_id=team_id).first()
        if existing is not None and existing.tenant_id != tenant.pk:
            raise ValueError(f"Slack team {team_id} belongs to another tenant")
        fields: dict[str, Any] = {
            "token_env": token_env,
            "secret_env": secret_env,
            "channel": channel,
            "agent_channels": agent_channels,
        }
        if existing is None:
            workspace = SlackWorkspace.objects.create(tenant=tenant, team_id=team_id, **fields)
        else:
            SlackWorkspace.objects.filter(pk=existing.pk).update(**fields)
            workspace = SlackWorkspace.objects.get(pk=existing.pk)
        cursor = cursor_open(CHANNEL_NAME, Subscription(subscriber(workspace), tenant.slug, from_head=True))
        audit_log().append(
            tenant.slug,
            actor=actor,
            kind="slack.workspace_registered",
            body={
                "team_id": team_id,
                "channel": channel,
                "agent_channels": agent_channels,
                "token_env": token_env,
                "secret_env": secret_env,
                "created": existing is None,
                "from_seq": cursor.seq,
            },
        )
    return workspace, existing is None
