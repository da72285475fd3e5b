"""Who belongs to a tenant (``tenants.services``) and its keys (``tenants.api_keys``): each change
is one audit event naming who made it, in the change's transaction; the last admin stays."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core import mail
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.test import Client
from django.utils import timezone

from audit.models import AuditEvent
from audit.selectors import audit_verify
from sitekit.errors import (
    AlreadyAMemberError,
    InvitationInvalidError,
    LastAdminError,
    NotAMemberError,
    NotFoundError,
)
from tenants.access import require_role, tenant_ids_for
from tenants.api_keys import api_key_create, api_key_revoke, api_key_verify
from tenants.changes import identity_changed, record
from tenants.models import Invitation, Membership, Role, Tenant
from tenants.services import (
    invitation_accept,
    invitation_create,
    member_add,
    member_deactivate,
    member_set_role,
)
from tests.site._audit import logged
from tests.site._threads import at_once

User = get_user_model()


class Event:
    """An audit event as a test compares it: actor and body (decoded)."""

    def __init__(self, row: AuditEvent) -> None:
        self.actor = row.actor
        self.body = json.loads(row.body)


def events(kind: str, tenant: str = "t1") -> list[Event]:
    """The tenant's numbered events of ``kind``, oldest first."""
    return [Event(row) for row in logged().filter(tenant_id=tenant, kind=kind).order_by("seq")]


@pytest.fixture
def t1(operator) -> Tenant:
    return Tenant.objects.get(slug="t1")


def test_adding_an_existing_person_is_one_event_by_the_admin(t1):
    """member_add of an existing user: an active membership and ``member.added`` by ``by``."""
    User.objects.create_user("ann", password="pw-ann-123456")
    membership, created = member_add(tenant=t1, username="ann", role=Role.APPROVER, by="op")
    assert not created and membership.role == Role.APPROVER
    [event] = events("member.added")
    assert event.actor == "op"
    assert event.body == {"username": "ann", "role": "approver", "created_user": False, "reactivated": False}
    assert audit_verify(tenant_id="t1").ok


def test_adding_a_new_person_creates_the_account_with_a_checked_password(t1):
    """A new username gets an account that signs in with the password; a weak one writes nothing."""
    with pytest.raises(ValidationError):
        member_add(tenant=t1, username="bea", role=Role.VIEWER, by="op", password="123")
    assert not User.objects.filter(username="bea").exists() and not events("member.added")
    member_add(tenant=t1, username="bea", role=Role.VIEWER, by="op", password="a-long-pass-4711")
    assert Client().login(username="bea", password="a-long-pass-4711")
    assert events("member.added")[0].body["created_user"] is True


def test_an_active_member_cannot_be_added_twice(t1):
    """AlreadyAMemberError, and no event."""
    with pytest.raises(AlreadyAMemberError):
        member_add(tenant=t1, username="viewer", role=Role.ADMIN, by="op")
    assert not events("member.added")


def test_a_role_change_names_the_old_and_new_role_and_the_same_role_is_a_no_op(t1):
    """member_set_role writes ``member.role_changed``; setting the role held writes nothing."""
    viewer = User.objects.get(username="viewer")
    member_set_role(tenant=t1, user=viewer, role=Role.VIEWER, by="op")
    assert not events("member.role_changed")
    member_set_role(tenant=t1, user=viewer, role=Role.RECONCILER, by="op")
    [event] = events("member.role_changed")
    assert (event.actor, event.body) == (
        "op",
        {"username": "viewer", "old_role": "viewer", "role": "reconciler"},
    )
    assert Membership.objects.get(user=viewer).role == Role.RECONCILER


def test_the_last_admin_can_be_neither_demoted_nor_deactivated(t1):
    """LastAdminError both ways, the role kept and nothing written; with a second admin, both work."""
    op = User.objects.get(username="op")
    with pytest.raises(LastAdminError):
        member_set_role(tenant=t1, user=op, role=Role.VIEWER, by="op")
    with pytest.raises(LastAdminError):
        member_deactivate(tenant=t1, user=op, by="op")
    assert Membership.objects.get(user=op).role == Role.ADMIN
    assert not events("member.role_changed") and not events("member.deactivated")
    member_set_role(tenant=t1, user=User.objects.get(username="viewer"), role=Role.ADMIN, by="op")
    member_set_role(tenant=t1, user=op, role=Role.VIEWER, by="op")
    assert Membership.objects.get(user=op).role == Role.VIEWER


def test_an_inactive_user_does_not_count_as_the_other_admin(t1):
    """A second admin whose account is deactivated cannot manage the tenant: the last active admin stays."""
    viewer = User.objects.get(username="viewer")
    member_set_role(tenant=t1, user=viewer, role=Role.ADMIN, by="op")
    User.objects.filter(pk=viewer.pk).update(is_active=False)
    with pytest.raises(LastAdminError):
        member_deactivate(tenant=t1, user=User.objects.get(username="op"), by="op")


def test_two_admins_demoting_each_other_at_once_leave_one_admin(t1):
    """Two admins, each demoting the other in the same instant: one change commits, the other is
    LastAdminError (the tenant's row lock puts them one after the other); one admin is left."""
    ann = User.objects.create_user("ann", password="pw-ann-123456")
    member_add(tenant=t1, username="ann", role=Role.ADMIN, by="op")
    op = User.objects.get(username="op")
    outcomes = at_once(
        [
            lambda: member_set_role(tenant=t1, user=ann, role=Role.VIEWER, by="op"),
            lambda: member_set_role(tenant=t1, user=op, role=Role.VIEWER, by="ann"),
        ]
    )
    refused = [o for o in outcomes if isinstance(o, LastAdminError)]
    assert len(refused) == 1, outcomes
    assert not any(isinstance(o, BaseException) and not isinstance(o, LastAdminError) for o in outcomes), (
        outcomes
    )
    assert Membership.objects.filter(tenant=t1, role=Role.ADMIN).count() == 1
    assert len(events("member.role_changed")) == 1
    assert audit_verify(tenant_id="t1").ok


def test_a_deactivated_member_sees_nothing_of_the_tenant_and_their_key_stops(t1):
    """After member_deactivate: no tenant for them, NotFound on every check, their key unverified;
    the row stays (the People page lists it); member_add brings them back."""
    viewer = User.objects.get(username="viewer")
    _, token = api_key_create(tenant=t1, user=viewer, by="op", name="v")
    assert api_key_verify(token=token) is not None
    member_deactivate(tenant=t1, user=viewer, by="op")
    assert tenant_ids_for(viewer) == []
    with pytest.raises(NotFoundError):
        require_role(viewer, "t1", Role.VIEWER)
    assert api_key_verify(token=token) is None
    assert Membership.all_objects.get(user=viewer).deactivated_at is not None
    [event] = events("member.deactivated")
    assert (event.actor, event.body) == ("op", {"username": "viewer", "role": "viewer"})
    with pytest.raises(NotAMemberError):
        member_deactivate(tenant=t1, user=viewer, by="op")
    member_add(tenant=t1, username="viewer", role=Role.APPROVER, by="op")
    assert require_role(viewer, "t1", Role.APPROVER).role == Role.APPROVER
    assert events("member.added")[-1].body["reactivated"] is True


def test_an_invitation_works_once_and_joins_the_tenant(t1, settings):
    """The email carries a link; using it creates the user and membership (``member.joined`` by
    them); the link then refuses, and the chain never holds the token."""
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    invitation, link = invitation_create(tenant=t1, email="New@Example.com", role=Role.APPROVER, by="op")
    [message] = mail.outbox
    assert message.to == ["New@example.com"] and link in message.body
    token = link.rstrip("/").rsplit("/", 1)[1]
    [invited] = events("member.invited")
    assert invited.actor == "op" and invited.body["email"] == "New@example.com"
    assert token not in str(invited.body) and invitation.token_hash != token
    user = invitation_accept(token=token, username="newbie", password="a-long-pass-4711")
    assert user.email == "New@example.com"
    assert require_role(user, "t1", Role.APPROVER)
    [joined] = events("member.joined")
    assert joined.actor == "newbie"
    assert joined.body == {
        "invitation_id": invitation.pk,
        "username": "newbie",
        "role": "approver",
        "invited_by": "op",
    }
    with pytest.raises(InvitationInvalidError):
        invitation_accept(token=token, username="other", password="a-long-pass-4711")
    assert not User.objects.filter(username="other").exists()


def test_an_invitation_used_twice_at_once_joins_once(t1, settings):
    """Two uses of one link in the same instant: one user made, the other InvitationInvalidError."""
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    _, link = invitation_create(tenant=t1, email="race@example.com", role=Role.VIEWER, by="op")
    token = link.rstrip("/").rsplit("/", 1)[1]
    outcomes = at_once(
        [
            lambda: invitation_accept(token=token, username="racer1", password="a-long-pass-4711"),
            lambda: invitation_accept(token=token, username="racer2", password="a-long-pass-4711"),
        ]
    )
    assert sum(isinstance(o, InvitationInvalidError) for o in outcomes) == 1, outcomes
    assert User.objects.filter(username__startswith="racer").count() == 1
    assert len(events("member.joined")) == 1


def test_an_expired_or_unknown_invitation_is_refused(t1, settings):
    """Past ``expires_at`` (or a made-up token) the link is InvitationInvalidError and nobody is created."""
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    invitation, link = invitation_create(tenant=t1, email="late@example.com", role=Role.VIEWER, by="op")
    Invitation.objects.filter(pk=invitation.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    token = link.rstrip("/").rsplit("/", 1)[1]
    for used in (token, "made-up"):
        with pytest.raises(InvitationInvalidError):
            invitation_accept(token=used, username="late", password="a-long-pass-4711")
    assert not User.objects.filter(username="late").exists()


def test_an_address_that_has_an_account_is_added_not_invited(t1, settings):
    """Inviting the email of an existing user is AlreadyAMemberError: no email, no event."""
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    User.objects.create_user("has", email="has@example.com", password="pw-has-123456")
    with pytest.raises(AlreadyAMemberError):
        invitation_create(tenant=t1, email="HAS@example.com", role=Role.VIEWER, by="op")
    assert not mail.outbox and not events("member.invited")


def test_a_key_created_and_revoked_is_two_events_without_its_secret(t1):
    """``api_key.created`` and ``api_key.revoked`` by ``by``, naming the key's prefix and user, never
    the secret or hash; a second revoke is a no-op that writes nothing."""
    op = User.objects.get(username="op")
    key, token = api_key_create(tenant=t1, user=op, by="root", name="ci")
    [created] = events("api_key.created")
    expected = {"key_id": key.pk, "prefix": key.prefix, "name": "ci", "username": "op"}
    assert (created.actor, created.body) == ("root", expected)
    api_key_revoke(key=key, by="root")
    api_key_revoke(key=key, by="root")
    [revoked] = events("api_key.revoked")
    assert (revoked.actor, revoked.body) == ("root", expected)
    chain = str([e.body for e in logged().filter(tenant_id="t1")])
    assert token.split("_", 2)[2] not in chain and key.hashed not in chain
    assert api_key_verify(token=token) is None


def test_a_change_nobody_audits_is_refused(transactional_db):
    """With no receiver on ``identity_changed`` (the audit app not listening), record() raises."""
    from audit.identity import on_identity_changed

    identity_changed.disconnect(dispatch_uid="audit.identity")
    try:
        with pytest.raises(ImproperlyConfigured):
            record("t1", actor="x", kind="member.added", body={})
    finally:
        identity_changed.connect(on_identity_changed, dispatch_uid="audit.identity")


def test_an_invitation_the_mail_server_refuses_leaves_nothing(t1, settings):
    """With the mail server down (a port nobody listens on) the OSError reaches the caller and
    neither an invitation nor a ``member.invited`` event is left."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = probe.getsockname()[1]
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", dead, 5
    with pytest.raises(OSError):
        invitation_create(tenant=t1, email="down@example.com", role=Role.VIEWER, by="op")
    assert not Invitation.objects.exists() and not events("member.invited")
