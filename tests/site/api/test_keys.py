"""API keys: made by command or admin, shown once, stored hashed, revocable."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.test import Client

from tenants.api_keys import api_key_verify
from tenants.models import ApiKey, Tenant
from tests.site.api.conftest import Api


def test_create_api_key_prints_the_key_alone_on_the_last_line_and_stores_only_its_hash(operator):
    """The last output line is a working key; the database holds its prefix and a sha256, not the secret."""
    out = io.StringIO()
    call_command("create_api_key", tenant="t1", user="op", name="ci", stdout=out)
    key = out.getvalue().strip().splitlines()[-1]
    assert key.startswith("kg_") and " " not in key
    row = ApiKey.objects.get(name="ci")
    secret = key.split("_", 2)[2]
    assert row.prefix in key and secret not in row.hashed and len(row.hashed) == 64
    response = Api(key).get("/runs")
    assert response.status_code == 200
    row.refresh_from_db()
    assert row.last_used_at is not None


def test_create_api_key_refuses_unknown_tenants_users_and_non_members(operator, transactional_db):
    """A key needs an existing tenant and a user who belongs to it."""
    get_user_model().objects.create_user("loner", password="pw-loner-123456")
    for tenant, user in [("nope", "op"), ("t1", "nobody"), ("t1", "loner")]:
        with pytest.raises(CommandError):
            call_command("create_api_key", tenant=tenant, user=user, stdout=io.StringIO())
    assert not ApiKey.objects.exists()


def test_the_admin_creates_a_key_and_shows_it_once(operator, transactional_db):
    """Adding a key in the admin shows the secret in a message once; the key then authenticates."""
    admin = get_user_model().objects.create_superuser("root", password="pw-root-123456")
    browser = Client()
    browser.force_login(admin)
    response = browser.post(
        "/admin/tenants/apikey/add/",
        {"tenant": Tenant.objects.get(slug="t1").pk, "user": operator.pk, "name": "from-admin"},
        follow=True,
    )
    assert response.status_code == 200
    shown = [str(m) for m in response.context["messages"]]
    assert shown, response.context.get("errors") or response.content.decode()[:2000]
    key = next(m.split(": ", 1)[1] for m in shown if "shown only this once" in m)
    assert api_key_verify(token=key) is not None
    assert ApiKey.objects.get(name="from-admin").user == operator
    assert "shown only this once" not in browser.get("/admin/tenants/apikey/").content.decode()


def test_the_admin_revokes_keys(keys):
    """The revoke action sets revoked_at; the key stops working."""
    admin = get_user_model().objects.create_superuser("root", password="pw-root-123456")
    browser = Client()
    browser.force_login(admin)
    row = ApiKey.objects.get(name="op")
    browser.post("/admin/tenants/apikey/", {"action": "revoke", "_selected_action": [row.pk]})
    row.refresh_from_db()
    assert row.revoked_at is not None
    assert Api(keys.t1).get("/runs").status_code == 401
