"""The front door: login lock-out (audited per tenant), usernames, DEBUG only when asked."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.test import Client

from audit.models import AuditEvent
from tenants.models import Membership, Role, Tenant

ROOT = Path(__file__).resolve().parents[3]
PASSWORD = "pw-op-123456"


def _try(client: Client, username: str, password: str):
    return client.post("/login/", {"username": username, "password": password})


@pytest.fixture
def two_tenants(operator):
    """``op`` is admin of t1 and viewer of t2."""
    Membership.objects.create(user=operator, tenant=Tenant.objects.create(slug="t2"), role=Role.VIEWER)
    return operator


def test_five_wrong_passwords_lock_the_pair_out_and_each_tenant_chain_records_it(two_tenants, settings):
    """Past the limit the right password is refused too (429, the console's page with its CSP);
    an auth.locked_out event lands in both of op's chains, naming the address, never a password."""
    client = Client(REMOTE_ADDR="203.0.113.7")
    for _ in range(settings.KEELGATE_LOGIN_FAILURE_LIMIT - 1):
        assert _try(client, "op", "wrong-guess").status_code == 200
    assert not AuditEvent.objects.filter(kind="auth.locked_out").exists()
    locked = _try(client, "op", "wrong-guess")
    assert locked.status_code == 429
    assert b"Too many attempts" in locked.content
    assert "script-src 'self'" in locked["Content-Security-Policy"]
    right = _try(client, "op", PASSWORD)
    assert right.status_code == 429 and "_auth_user_id" not in client.session
    events = AuditEvent.objects.filter(kind="auth.locked_out").order_by("tenant_id")
    assert [e.tenant_id for e in events] == ["t1", "t2"]
    for event in events:
        body = json.loads(event.body)
        assert body == {"username": "op", "ip_address": "203.0.113.7"}
        assert "wrong-guess" not in event.body and event.actor == "keelgate:login-throttle"


def test_a_lock_out_holds_one_address_only(operator, settings):
    """A stranger locking op out from their address does not lock op out from op's own."""
    stranger = Client(REMOTE_ADDR="198.51.100.9")
    for _ in range(settings.KEELGATE_LOGIN_FAILURE_LIMIT):
        _try(stranger, "op", "guess")
    assert _try(stranger, "op", PASSWORD).status_code == 429
    own = Client(REMOTE_ADDR="192.0.2.1")
    response = _try(own, "op", PASSWORD)
    assert response.status_code == 302 and own.session["_auth_user_id"] == str(operator.pk)


def test_a_success_before_the_limit_resets_the_count(operator, settings):
    """Four misses, a success, four more misses: still not locked (the count restarted)."""
    client = Client(REMOTE_ADDR="192.0.2.2")
    for _ in range(2):
        for _ in range(settings.KEELGATE_LOGIN_FAILURE_LIMIT - 1):
            assert _try(client, "op", "nope").status_code == 200
        assert _try(client, "op", PASSWORD).status_code == 302
        client.post("/logout/")
    assert not AuditEvent.objects.filter(kind="auth.locked_out").exists()


def test_locking_out_a_username_nobody_has_writes_no_chain(operator, settings):
    """A guessed username is throttled too, but belongs to no tenant: no chain gets an event."""
    client = Client(REMOTE_ADDR="192.0.2.3")
    for _ in range(settings.KEELGATE_LOGIN_FAILURE_LIMIT):
        _try(client, "ghost", "x")
    assert _try(client, "ghost", "x").status_code == 429
    assert not AuditEvent.objects.filter(kind="auth.locked_out").exists()


def test_the_admin_login_is_throttled_as_well(operator, settings):
    """The admin's login form goes through the same backends: locked out after the limit."""
    client = Client(REMOTE_ADDR="192.0.2.4")
    for _ in range(settings.KEELGATE_LOGIN_FAILURE_LIMIT):
        client.post("/admin/login/", {"username": "op", "password": "nope"})
    assert client.post("/admin/login/", {"username": "op", "password": PASSWORD}).status_code == 429


@pytest.mark.parametrize("username", ["<b>x</b>", "has space", "a" * 151, "", "semi;colon"])
def test_keelgate_operator_refuses_a_username_django_would(transactional_db, username):
    """Markup, spaces, >150 characters, blanks: refused with Django's reason, no user made."""
    call_command("keelgate_tenant", "acme", stdout=io.StringIO())
    with pytest.raises(CommandError, match="invalid username"):
        call_command("keelgate_operator", username, tenant="acme", role="viewer", stdout=io.StringIO())
    assert not get_user_model().objects.exists()


def test_keelgate_operator_takes_every_name_django_allows(transactional_db):
    """Letters, digits and @.+-_ pass as they are."""
    call_command("keelgate_tenant", "acme", stdout=io.StringIO())
    call_command("keelgate_operator", "ann.b+ops@x_y-1", tenant="acme", role="viewer", stdout=io.StringIO())
    assert get_user_model().objects.get().username == "ann.b+ops@x_y-1"


def _django(code: str, env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("KEELGATE_") and k != "DATABASE_URL"}
    full.update(
        {"DJANGO_SETTINGS_MODULE": "keelgate_site.settings", "KEELGATE_VAR_DIR": str(tmp_path), **env}
    )
    full.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup()\n" + code],
        cwd=ROOT,
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
    )


def production_env() -> dict[str, str]:
    """What docs/deploy.md tells a deployment to set (the database aside)."""
    return {
        "KEELGATE_DEBUG": "0",
        "KEELGATE_SECRET_KEY": base64.b64encode(os.urandom(48)).decode(),
        "KEELGATE_AUDIT_SIGNING_KEY": base64.b64encode(os.urandom(32)).decode(),
        "KEELGATE_ALLOWED_HOSTS": "console.example.com",
    }


PROBE = """
import json
from django.conf import settings
from django.test import Client
r = Client(HTTP_HOST=settings.ALLOWED_HOSTS[0]).get("/login/", secure=True)
missing = Client(HTTP_HOST=settings.ALLOWED_HOSTS[0]).get("/no-such-page/", secure=True)
print(json.dumps({
    "debug": settings.DEBUG,
    "session_secure": settings.SESSION_COOKIE_SECURE,
    "csrf_secure": settings.CSRF_COOKIE_SECURE,
    "ssl_redirect": settings.SECURE_SSL_REDIRECT,
    "hsts": r.get("Strict-Transport-Security", ""),
    "csp": r.get("Content-Security-Policy", ""),
    "csrf_cookie": r.cookies["csrftoken"].output() if "csrftoken" in r.cookies else "",
    "status": r.status_code,
    "missing_status": missing.status_code,
    "missing_body": missing.content.decode(errors="replace"),
}))
"""


def test_production_settings_send_hsts_secure_cookies_and_the_csp(tmp_path):
    """KEELGATE_DEBUG=0: DEBUG off, HSTS a year with subdomains, Secure cookies, SSL redirect, the CSP."""
    result = _django(PROBE, production_env(), tmp_path)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["status"] == 200 and seen["debug"] is False
    assert seen["hsts"] == "max-age=31536000; includeSubDomains; preload"
    assert seen["session_secure"] and seen["csrf_secure"] and seen["ssl_redirect"]
    assert "Secure" in seen["csrf_cookie"] and "HttpOnly" not in seen["csrf_cookie"]
    assert "default-src 'self'" in seen["csp"] and "'unsafe-inline'" not in seen["csp"]


def test_a_start_without_settings_has_debug_off_and_a_key_of_its_own(tmp_path):
    """Nothing set: DEBUG off (a plain 404, no URL patterns), a random secret kept in var/ (0600)."""
    result = _django(PROBE, {}, tmp_path)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["debug"] is False and seen["missing_status"] == 404
    assert "URLconf" not in seen["missing_body"] and "keelgate_site.urls" not in seen["missing_body"]
    key = tmp_path / "secret_key"
    assert key.stat().st_mode & 0o777 == 0o600 and len(key.read_text()) >= 50
    again = _django("from django.conf import settings; print(settings.SECRET_KEY)", {}, tmp_path)
    assert again.stdout.strip() == key.read_text().strip()


def test_debug_refuses_a_host_that_is_not_loopback(tmp_path):
    """KEELGATE_DEBUG=1 with a public host name in KEELGATE_ALLOWED_HOSTS does not start."""
    env = {"KEELGATE_DEBUG": "1", "KEELGATE_ALLOWED_HOSTS": "console.example.com"}
    result = _django("print('started')", env, tmp_path)
    assert result.returncode != 0 and "started" not in result.stdout
    assert "loopback only" in result.stderr


def test_keelgate_serve_in_debug_refuses_a_public_bind(tmp_path):
    """``make run``'s command with DEBUG on and --bind 0.0.0.0 exits before serving anything."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEELGATE_") and k != "DATABASE_URL"}
    env.update({"KEELGATE_DEBUG": "1", "KEELGATE_VAR_DIR": str(tmp_path)})
    result = subprocess.run(
        [sys.executable, "manage.py", "keelgate_serve", "--bind", "0.0.0.0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "refusing to bind 0.0.0.0" in result.stderr
    assert not (tmp_path / "keelgate.sqlite3").exists()  # refused before migrating


@pytest.mark.parametrize(("server", "status"), [(("10.1.2.3", 8000), 403), (("127.0.0.1", 8000), 200)])
def test_with_debug_on_the_asgi_app_answers_loopback_connections_only(settings, server, status):
    """A DEBUG server bound to 0.0.0.0 by mistake: a connection to a public address gets 403."""
    from keelgate_site.asgi import loopback_only

    settings.DEBUG = True
    sent: list[dict[str, object]] = []

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})

    async def send(message):
        sent.append(message)

    async def receive():
        return {"type": "http.request"}

    scope = {"type": "http", "server": server, "path": "/"}
    asyncio.run(loopback_only(app)(scope, receive, send))
    assert sent[0]["status"] == status
