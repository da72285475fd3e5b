"""Who belongs to a tenant: add, invite, change a role, deactivate; and a sign-in.

Every entry point (the console's People page, ``manage.py keelgate_operator``, Django's
admin) changes memberships here and nowhere else, so each change writes its audit event
(:mod:`tenants.changes`) in its own transaction, naming the person or command that made it.

A tenant never loses its last admin: a change that would leave it none is refused
(:class:`~sitekit.errors.LastAdminError`). The check and the change run under a lock on
the tenant's row, so two admins demoting each other at once are taken one after the
other, and the second is refused.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.mail import send_mail
from django.db import transaction
from django.utils import timezone

from sitekit.errors import AlreadyAMemberError, InvitationInvalidError, LastAdminError, NotAMemberError
from tenants.changes import record
from tenants.models import Invitation, Membership, Role, Tenant

__all__ = [
    "INVITATION_LIFETIME",
    "invitation_accept",
    "invitation_create",
    "invitation_find",
    "member_add",
    "member_deactivate",
    "member_set_role",
    "member_signed_in",
]

INVITATION_LIFETIME = timedelta(hours=72)
"""How long an invitation link works where ``KEELGATE_INVITATION_HOURS`` is not set."""


def _lock_tenant(tenant: Tenant) -> None:
    """Take the tenant's row lock: every membership change of a tenant runs one at a time."""
    Tenant.objects.select_for_update().filter(pk=tenant.pk).first()


def _refuse_last_admin(tenant: Tenant, membership: Membership) -> None:
    """LastAdminError if ``membership`` is the tenant's only active admin (under the tenant's lock)."""
    if membership.role != Role.ADMIN:
        return
    admins = Membership.objects.filter(tenant=tenant, role=Role.ADMIN).exclude(pk=membership.pk)
    if not admins.filter(user__is_active=True).exists():
        raise LastAdminError()


def member_add(
    *,
    tenant: Tenant,
    username: str,
    role: str,
    by: str,
    email: str = "",
    password: str | None = None,
) -> tuple[Membership, bool]:
    """Make ``username`` a member of ``tenant`` with ``role``; the membership and whether the
    user was created.

    A username the user model refuses is Django's ValidationError. A missing user is
    created (with ``password``, checked by the site's password
    validators, or none: they cannot log in until one is set). A deactivated membership
    comes back with the new role; an active one is AlreadyAMemberError (change the
    role instead). ``by`` is the actor of the ``member.added`` event.
    """
    Role(role)
    User = get_user_model()
    # The model field's own validators (letters, digits and @.+-_, 150 at most), as the
    # admin's forms apply them: a username is never markup or a blank.
    username = User._meta.get_field("username").clean(username, None)
    with transaction.atomic():
        _lock_tenant(tenant)
        user = User.objects.filter(username=username).first()
        created = user is None
        if user is None:
            user = User(username=username, email=email)
            if password:
                validate_password(password, user)
                user.set_password(password)
            else:
                user.set_unusable_password()
            user.save()
        membership = Membership.all_objects.filter(tenant=tenant, user=user).first()
        reactivated = membership is not None
        if membership is not None and membership.deactivated_at is None:
            raise AlreadyAMemberError(username)
        if membership is None:
            membership = Membership.all_objects.create(tenant=tenant, user=user, role=role)
        else:
            membership.role, membership.deactivated_at = role, None
            membership.save(update_fields=["role", "deactivated_at"])
        record(
            tenant.slug,
            actor=by,
            kind="member.added",
            body={"username": username, "role": role, "created_user": created, "reactivated": reactivated},
        )
    return membership, created


def member_set_role(*, tenant: Tenant, user: Any, role: str, by: str) -> Membership:
    """Change ``user``'s role in ``tenant`` (``member.role_changed``); the same role is a no-op.

    NotAMemberError for someone who is not an active member; LastAdminError if it would
    leave the tenant without an admin.
    """
    Role(role)
    with transaction.atomic():
        _lock_tenant(tenant)
        membership = Membership.objects.filter(tenant=tenant, user=user).first()
        if membership is None:
            raise NotAMemberError(tenant.slug)
        if membership.role == role:
            return membership
        if role != Role.ADMIN:
            _refuse_last_admin(tenant, membership)
        old = membership.role
        membership.role = role
        membership.save(update_fields=["role"])
        record(
            tenant.slug,
            actor=by,
            kind="member.role_changed",
            body={"username": user.get_username(), "old_role": old, "role": role},
        )
    return membership


def member_deactivate(*, tenant: Tenant, user: Any, by: str) -> Membership:
    """End ``user``'s membership of ``tenant`` (``member.deactivated``): from now on they see
    nothing of it, and their keys of it stop working. The row stays, for the People page.

    NotAMemberError for someone not an active member; LastAdminError for the last admin.
    """
    with transaction.atomic():
        _lock_tenant(tenant)
        membership = Membership.objects.filter(tenant=tenant, user=user).first()
        if membership is None:
            raise NotAMemberError(tenant.slug)
        _refuse_last_admin(tenant, membership)
        membership.deactivated_at = timezone.now()
        membership.save(update_fields=["deactivated_at"])
        record(
            tenant.slug,
            actor=by,
            kind="member.deactivated",
            body={"username": user.get_username(), "role": membership.role},
        )
    return membership


def _token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def _invitation_lifetime() -> timedelta:
    hours = getattr(settings, "KEELGATE_INVITATION_HOURS", None)
    return INVITATION_LIFETIME if hours is None else timedelta(hours=float(hours))


def invitation_create(*, tenant: Tenant, email: str, role: str, by: str) -> tuple[Invitation, str]:
    """Invite ``email`` to ``tenant`` as ``role``: email them a link that works once, until it
    expires (``member.invited``); the invitation and the link.

    An address that already belongs to a user is AlreadyAMemberError: add that person by
    username instead (a link that sets the password of an existing account would be a
    password reset by another name). A message the mail server does not take raises its
    OSError, and nothing is recorded.
    """
    Role(role)
    email = get_user_model().objects.normalize_email(email.strip())
    if get_user_model().objects.filter(email__iexact=email).exists():
        raise AlreadyAMemberError(email)
    token = secrets.token_urlsafe(32)
    with transaction.atomic():
        invitation = Invitation.objects.create(
            tenant=tenant,
            email=email,
            role=role,
            token_hash=_token_hash(token),
            invited_by=by,
            expires_at=timezone.now() + _invitation_lifetime(),
        )
        record(
            tenant.slug,
            actor=by,
            kind="member.invited",
            body={
                "invitation_id": invitation.pk,
                "email": email,
                "role": role,
                "expires_at": invitation.expires_at.isoformat(),
            },
        )
        # Sent inside the transaction: a message that cannot be sent (the mail server
        # refuses, or is down: OSError) leaves no invitation and no event behind.
        base = str(getattr(settings, "KEELGATE_CONSOLE_URL", "http://127.0.0.1:8000")).rstrip("/")
        link = f"{base}/invite/{quote(token)}/"
        send_mail(
            subject=f"You are invited to Keelgate ({tenant.slug})",
            message=(
                f"{by} invites you to the tenant {tenant.slug} of Keelgate as {role}.\n\n"
                f"Choose your username and password here (the link works once, until"
                f" {_when(invitation.expires_at)}):\n\n{link}\n"
            ),
            from_email=None,
            recipient_list=[email],
        )
    return invitation, link


def _when(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC")


def invitation_find(*, token: str) -> Invitation:
    """The unused, unexpired invitation ``token`` names; InvitationInvalidError otherwise."""
    invitation = (
        Invitation.objects.select_related("tenant")
        .filter(token_hash=_token_hash(token), accepted_at__isnull=True, expires_at__gt=timezone.now())
        .first()
    )
    if invitation is None:
        raise InvitationInvalidError()
    return invitation


def invitation_accept(*, token: str, username: str, password: str) -> Any:
    """Use the invitation ``token`` names: create the user with ``password`` and make them a
    member with the invited role (``member.joined``, by the new user); the user.

    Single use: the invitation's row is locked and marked used in the same transaction,
    so a second use (or two at once) is InvitationInvalidError, as is an expired link.
    A username already taken is AlreadyAMemberError; a weak password, Django's
    ValidationError from the site's password validators or the username's.
    """
    User = get_user_model()
    with transaction.atomic():
        found = invitation_find(token=token)
        invitation = Invitation.objects.select_for_update().get(pk=found.pk)
        if invitation.accepted_at is not None:
            raise InvitationInvalidError()
        username = User._meta.get_field("username").clean(username, None)
        if User.objects.filter(username=username).exists():
            raise AlreadyAMemberError(username)
        user = User(username=username, email=invitation.email)
        validate_password(password, user)
        user.set_password(password)
        user.save()
        tenant = found.tenant
        _lock_tenant(tenant)
        Membership.all_objects.create(tenant=tenant, user=user, role=invitation.role)
        invitation.accepted_at, invitation.accepted_by = timezone.now(), user
        invitation.save(update_fields=["accepted_at", "accepted_by"])
        record(
            tenant.slug,
            actor=username,
            kind="member.joined",
            body={
                "invitation_id": invitation.pk,
                "username": username,
                "role": invitation.role,
                "invited_by": invitation.invited_by,
            },
        )
    return user


def member_signed_in(*, user: Any, address: str | None) -> list[str]:
    """Write ``auth.signed_in`` into each tenant ``user`` is an active member of; their slugs.

    A person with no tenant has no chain to write to (Django's ``last_login`` still moves).
    """
    tenants = sorted(Membership.objects.filter(user=user).values_list("tenant__slug", flat=True))
    body = {"username": user.get_username(), "address": address or "unknown"}
    with transaction.atomic():
        for tenant_id in tenants:
            record(tenant_id, actor=user.get_username(), kind="auth.signed_in", body=body)
    return tenants
