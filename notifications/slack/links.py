"""Who a Slack user is in Keelgate: a link per workspace, made by the person or by an admin.

A person links themself with a one-time code: the console's Slack page makes one
(:func:`link_code_create`; shown once, stored hashed, valid ``CODE_TTL``), and they send
``/keelgate link CODE`` from Slack; the signed slash command (:mod:`.endpoints`) calls
:func:`link_by_code`, which links the Slack user who sent it to the person who made the
code, in the workspace it came from. An admin links with ``keelgate_slack link``
(:func:`link_by_admin`). Each link and unlink is an audit event; a Slack user has one
link per workspace, and a person one Slack user per workspace (a new link replaces the
old one).

A link names a person, not a role: what they may decide is their membership's role at
the moment of the click, as in the console.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from audit.wiring import audit_log
from notifications.models import SlackLink, SlackLinkCode, SlackWorkspace
from tenants.models import Membership, Tenant

CODE_TTL = timedelta(minutes=10)
CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
CODE_LENGTH = 10


class LinkRefused(Exception):
    """The link cannot be made: the words say why, for the person who asked."""


def _digest(code: str) -> str:
    return hashlib.sha256(code.strip().upper().replace("-", "").encode()).hexdigest()


def link_code_create(*, tenant: Tenant, user: Any) -> str:
    """A new one-time code for ``user`` in ``tenant`` (a member); earlier unused codes stop working."""
    if not Membership.objects.filter(tenant=tenant, user=user).exists():
        raise LinkRefused("You are not a member of this tenant.")
    code = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))
    with transaction.atomic():
        SlackLinkCode.objects.filter(tenant=tenant, user=user, used_at=None).delete()
        SlackLinkCode.objects.create(
            tenant=tenant, user=user, code_hash=_digest(code), expires_at=timezone.now() + CODE_TTL
        )
    return f"{code[:5]}-{code[5:]}"


def link_by_code(*, workspace: SlackWorkspace, slack_user: str, code: str) -> Any:
    """Link ``slack_user`` to whoever made ``code`` in the workspace's tenant; the user linked.

    LinkRefused for a code that is unknown, used, expired, of another tenant, or of a
    person who is no longer a member.
    """
    now = timezone.now()
    with transaction.atomic():
        found = (
            SlackLinkCode.objects.select_for_update()
            .select_related("user")
            .filter(code_hash=_digest(code), tenant_id=workspace.tenant_id)
            .first()
        )
        if found is None or found.used_at is not None or found.expires_at <= now:
            raise LinkRefused("That code is unknown, used or expired: make a new one in the console.")
        SlackLinkCode.objects.filter(pk=found.pk).update(used_at=now)
        user = found.user
        if (
            not user.is_active
            or not Membership.objects.filter(tenant_id=workspace.tenant_id, user=user).exists()
        ):
            raise LinkRefused("The code's owner is no longer a member of this tenant.")
        _link(workspace, slack_user, user, by=user.get_username(), how="code")
    return user


def link_by_admin(*, workspace: SlackWorkspace, slack_user: str, username: str, actor: str) -> Any:
    """Link ``slack_user`` to the member ``username``, as an admin (``actor``) says; the user."""
    user = get_user_model().objects.filter(username=username, is_active=True).first()
    if user is None or not Membership.objects.filter(tenant_id=workspace.tenant_id, user=user).exists():
        raise LinkRefused(f"{username} is not an active member of {workspace.tenant.slug}.")
    with transaction.atomic():
        _link(workspace, slack_user, user, by=actor, how="admin")
    return user


def unlink(*, workspace: SlackWorkspace, slack_user: str, actor: str) -> bool:
    """Remove the Slack user's link; False if there was none."""
    with transaction.atomic():
        link = (
            SlackLink.objects.select_related("user")
            .filter(workspace=workspace, slack_user=slack_user)
            .first()
        )
        if link is None:
            return False
        link.delete()
        audit_log().append(
            workspace.tenant.slug,
            actor=actor,
            kind="slack.unlinked",
            body={
                "team_id": workspace.team_id,
                "slack_user": slack_user,
                "username": link.user.get_username(),
            },
        )
    return True


def _link(workspace: SlackWorkspace, slack_user: str, user: Any, *, by: str, how: str) -> None:
    if not slack_user or len(slack_user) > 32:
        raise LinkRefused("Slack did not say who sent this.")
    SlackLink.objects.filter(workspace=workspace).filter(slack_user=slack_user).delete()
    SlackLink.objects.filter(workspace=workspace, user=user).delete()
    SlackLink.objects.create(workspace=workspace, slack_user=slack_user, user=user, linked_by=by)
    audit_log().append(
        workspace.tenant.slug,
        actor=by,
        kind="slack.linked",
        body={
            "team_id": workspace.team_id,
            "slack_user": slack_user,
            "username": user.get_username(),
            "how": how,
        },
    )
