"""The same changes made from the commands and from Django's admin write the same audit
events as the console's pages, naming the command or the admin."""

from __future__ import annotations

import io
import json

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.test import Client

from tenants.models import ApiKey, Membership, Role, Tenant
from tests.site._audit import logged

User = get_user_model()


def run(*args, **kwargs) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO(), **kwargs)
    return out.getvalue()


def chain(tenant: str = "t1") -> list[tuple[str, str, dict]]:
    """(kind, actor, body) of the tenant's identity events, oldest first."""
    rows = logged().filter(tenant_id=tenant, kind__regex=r"^(member|api_key)\.").order_by("seq")
    return [(e.kind, e.actor, json.loads(e.body)) for e in rows]


def test_keelgate_operator_audits_the_membership_and_each_role_change(transactional_db):
    """A new operator is ``member.added``, a new role ``member.role_changed``, the same role nothing;
    the actor is the command."""
    run("keelgate_tenant", "acme")
    run("keelgate_operator", "ann", tenant="acme", role="admin")
    run("keelgate_operator", "bob", tenant="acme", role="viewer")
    run("keelgate_operator", "bob", tenant="acme", role="approver")
    run("keelgate_operator", "bob", tenant="acme", role="approver")
    actor = "manage.py keelgate_operator"
    assert chain("acme") == [
        (
            "member.added",
            actor,
            {"username": "ann", "role": "admin", "created_user": False, "reactivated": False},
        ),
        (
            "member.added",
            actor,
            {"username": "bob", "role": "viewer", "created_user": False, "reactivated": False},
        ),
        ("member.role_changed", actor, {"username": "bob", "old_role": "viewer", "role": "approver"}),
    ]


def test_keelgate_operator_refuses_to_demote_the_last_admin(transactional_db):
    """The command says why and changes nothing."""
    run("keelgate_tenant", "acme")
    run("keelgate_operator", "ann", tenant="acme", role="admin")
    with pytest.raises(CommandError, match="last admin"):
        run("keelgate_operator", "ann", tenant="acme", role="viewer")
    assert Membership.objects.get(user__username="ann").role == Role.ADMIN


def test_create_api_key_audits_the_key(operator):
    """``api_key.created`` by the command, naming the key and its user, not the secret."""
    key = run("create_api_key", tenant="t1", user="op", name="ci").strip().splitlines()[-1]
    row = ApiKey.objects.get(name="ci")
    [(kind, actor, body)] = chain()
    assert (kind, actor) == ("api_key.created", "manage.py create_api_key")
    assert body == {"key_id": row.pk, "prefix": row.prefix, "name": "ci", "username": "op"}
    assert key.split("_", 2)[2] not in str(body)


@pytest.fixture
def root(operator) -> Client:
    """A superuser in Django's admin."""
    User.objects.create_superuser("root", password="pw-root-123456")
    browser = Client()
    browser.force_login(User.objects.get(username="root"))
    return browser


def test_the_admin_writes_the_same_events_for_memberships(root, operator):
    """Adding, changing and deleting a membership in Django's admin: ``member.added``,
    ``member.role_changed``, ``member.deactivated`` by the admin; the last admin stays."""
    t1 = Tenant.objects.get(slug="t1")
    ann = User.objects.create_user("ann", password="pw-ann-123456")
    added = root.post("/admin/tenants/membership/add/", {"user": ann.pk, "tenant": t1.pk, "role": "approver"})
    assert added.status_code == 302, added.content.decode()[:2000]
    membership = Membership.objects.get(user=ann)
    root.post(f"/admin/tenants/membership/{membership.pk}/change/", {"role": "admin"})
    assert Membership.objects.get(user=ann).role == Role.ADMIN
    root.post(f"/admin/tenants/membership/{membership.pk}/delete/", {"post": "yes"})
    assert not Membership.objects.filter(user=ann).exists()
    assert Membership.all_objects.get(user=ann).deactivated_at is not None
    assert chain() == [
        (
            "member.added",
            "root",
            {"username": "ann", "role": "approver", "created_user": False, "reactivated": False},
        ),
        ("member.role_changed", "root", {"username": "ann", "old_role": "approver", "role": "admin"}),
        ("member.deactivated", "root", {"username": "ann", "role": "admin"}),
    ]
    last = Membership.objects.get(user=operator)
    refused = root.post(f"/admin/tenants/membership/{last.pk}/change/", {"role": "viewer"}, follow=True)
    assert "last admin" in " ".join(str(m) for m in refused.context["messages"])
    assert Membership.objects.get(user=operator).role == Role.ADMIN


def test_the_admin_writes_the_same_events_for_keys(root, operator):
    """A key added and revoked in Django's admin: ``api_key.created`` and ``api_key.revoked`` by root."""
    t1 = Tenant.objects.get(slug="t1")
    root.post("/admin/tenants/apikey/add/", {"tenant": t1.pk, "user": operator.pk, "name": "adm"})
    key = ApiKey.objects.get(name="adm")
    root.post("/admin/tenants/apikey/", {"action": "revoke", "_selected_action": [key.pk]})
    expected = {"key_id": key.pk, "prefix": key.prefix, "name": "adm", "username": "op"}
    assert chain() == [("api_key.created", "root", expected), ("api_key.revoked", "root", expected)]


def test_the_tenant_page_lists_members_read_only(root, operator):
    """The tenant's admin page shows its members but offers no inline form to change them."""
    page = root.get(f"/admin/tenants/tenant/{Tenant.objects.get(slug='t1').pk}/change/").content.decode()
    assert "op" in page and 'name="memberships-0-role"' not in page
