"""The console's People and API keys pages and the invitation link: admins only, CSRF, the
last admin, the secret shown once, a revoked key refused; sign-ins audited; and a viewer
sees no decision buttons."""

from __future__ import annotations

import html
import json
import re

import pytest
from django.contrib.auth import get_user_model
from django.core import mail
from django.test import Client

from sitekit.pages import CONTENT_SECURITY_POLICY
from tenants.models import ApiKey, Membership, Role, Tenant
from tests.site._audit import logged

User = get_user_model()
ADMIN_PAGES = ("/people/", "/keys/")


def signed_in(username: str, **kwargs) -> Client:
    client = Client(**kwargs)
    client.force_login(User.objects.get(username=username))
    return client


def flashes(response) -> str:
    return html.unescape(
        " ".join(re.findall(r'<p class="flash [^"]*">(.*?)</p>', response.content.decode(), re.S))
    )


def kinds(kind: str) -> list[tuple[str, str, dict]]:
    """(tenant, actor, body) of each numbered event of ``kind``, oldest first."""
    rows = logged().filter(kind=kind).order_by("tenant_id", "seq")
    return [(e.tenant_id, e.actor, json.loads(e.body)) for e in rows]


@pytest.fixture
def people(operator):
    """op admin of t1; viewer viewer of t1; ann approver of t1; op also viewer of t2."""
    t1 = Tenant.objects.get(slug="t1")
    ann = User.objects.create_user("ann", password="pw-ann-123456")
    Membership.objects.create(user=ann, tenant=t1, role=Role.APPROVER)
    Membership.objects.create(user=operator, tenant=Tenant.objects.create(slug="t2"), role=Role.VIEWER)
    return operator


@pytest.mark.parametrize("who", ["viewer", "ann"])
def test_viewers_and_approvers_get_403_and_no_link(people, who):
    """A viewer or approver: 403 on both admin pages and on a form posted to them; no nav link."""
    client = signed_in(who)
    for page in ADMIN_PAGES:
        assert client.get(page).status_code == 403, page
    assert client.post("/people/t1/add/", {"username": "x", "role": "admin"}).status_code == 403
    assert client.post("/keys/t1/create/", {"user": people.pk}).status_code == 403
    inbox = client.get("/").content.decode()
    assert 'href="/people/"' not in inbox and 'href="/keys/"' not in inbox
    assert not Membership.objects.filter(user__username="x").exists()


def test_an_admin_sees_the_pages_of_their_tenants_only(people):
    """op (admin of t1, viewer of t2): the links, the pages with t1 only, 404 for t2's and a
    tenant they are not in, CSP and no-store on the page."""
    client = signed_in("op")
    inbox = client.get("/").content.decode()
    assert 'href="/people/"' in inbox and 'href="/keys/"' in inbox
    page = client.get("/people/")
    assert page.status_code == 200
    assert page.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
    assert "no-store" in page.headers["Cache-Control"]
    body = page.content.decode()
    assert 'id="people-t1"' in body and 'id="people-t2"' not in body
    assert 'data-member="viewer"' in body and 'data-member="ann"' in body
    assert client.post("/people/t2/add/", {"username": "ann", "role": "viewer"}).status_code == 403
    assert client.post("/people/nope/add/", {"username": "ann", "role": "viewer"}).status_code == 404
    assert client.get("/keys/").status_code == 200


def test_posts_need_the_csrf_token(people):
    """Without the token each form is 403 and nothing changes."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(people)
    ann = User.objects.get(username="ann")
    posts = {
        "/people/t1/add/": {"username": "zed", "role": "viewer"},
        f"/people/t1/{ann.pk}/role/": {"role": "admin"},
        f"/people/t1/{ann.pk}/deactivate/": {},
        "/people/t1/invite/": {"email": "a@example.com", "role": "viewer"},
        "/keys/t1/create/": {"user": ann.pk},
    }
    for url, data in posts.items():
        assert client.post(url, data).status_code == 403, url
    assert Membership.objects.get(user=ann).role == Role.APPROVER
    assert not ApiKey.objects.exists() and not kinds("member.added")


def test_an_admin_adds_changes_and_deactivates_with_events_in_their_name(people):
    """Each form: the change, a flash, and its event with actor op; the page shows last sign-in."""
    client = signed_in("op")
    added = client.post(
        "/people/t1/add/",
        {"username": "newbie", "role": "viewer", "password": "a-long-pass-4711"},
        follow=True,
    )
    assert "newbie is now viewer in t1 (new account)." in flashes(added)
    newbie = User.objects.get(username="newbie")
    client.post(f"/people/t1/{newbie.pk}/role/", {"role": "reconciler"})
    assert Membership.objects.get(user=newbie).role == Role.RECONCILER
    client.post(f"/people/t1/{newbie.pk}/deactivate/")
    assert not Membership.objects.filter(user=newbie).exists()
    page = client.get("/people/").content.decode()
    assert re.search(r'data-member="newbie".*?deactivated', page, re.S)
    assert [(t, a) for t, a, _ in kinds("member.added")] == [("t1", "op")]
    assert [(t, a) for t, a, _ in kinds("member.role_changed")] == [("t1", "op")]
    assert [(t, a) for t, a, _ in kinds("member.deactivated")] == [("t1", "op")]
    refused = client.post("/people/t1/add/", {"username": "bad name!", "role": "viewer"}, follow=True)
    assert (
        "Enter a valid username" in flashes(refused)
        and not User.objects.filter(username="bad name!").exists()
    )
    weak = client.post(
        "/people/t1/add/", {"username": "weak", "role": "viewer", "password": "1"}, follow=True
    )
    assert "too short" in flashes(weak) and not User.objects.filter(username="weak").exists()


def test_the_last_admin_is_refused_with_a_clear_message(people):
    """op, t1's only admin, demoting or deactivating themselves: refused with the reason; role kept."""
    client = signed_in("op")
    for url, data in (
        (f"/people/t1/{people.pk}/role/", {"role": "viewer"}),
        (f"/people/t1/{people.pk}/deactivate/", {}),
    ):
        answer = client.post(url, data, follow=True)
        assert answer.status_code == 200
        assert "This is the tenant's last admin: make someone else admin first." in flashes(answer)
    assert Membership.objects.get(user=people, tenant__slug="t1").role == Role.ADMIN
    assert not kinds("member.role_changed") and not kinds("member.deactivated")


def test_a_member_of_another_tenant_is_not_found(people):
    """A user id that is no member of the tenant: 404 (nothing learned about other tenants)."""
    stranger = User.objects.create_user("stranger", password="pw-stranger-123")
    Membership.objects.create(user=stranger, tenant=Tenant.objects.get(slug="t2"), role=Role.ADMIN)
    client = signed_in("op")
    assert client.post(f"/people/t1/{stranger.pk}/role/", {"role": "viewer"}).status_code == 404
    assert client.post("/keys/t1/create/", {"user": stranger.pk}).status_code == 404


def test_a_key_is_shown_once_listed_and_revoked_to_401(people):
    """Create: the secret in that answer only; the list names it, the user, created and last used;
    after a revoke the API answers 401 with it at once."""
    client = signed_in("op")
    ann = User.objects.get(username="ann")
    created = client.post("/keys/t1/create/", {"name": "ci <b>", "user": ann.pk})
    assert created.status_code == 200
    secret = html.unescape(
        re.search(r'<code id="new-key-secret">(.*?)</code>', created.content.decode()).group(1)
    )
    assert secret.startswith("kg_") and "ci &lt;b&gt;" in created.content.decode()
    api = Client(headers={"Authorization": f"Bearer {secret}"})
    assert api.get("/api/v1/runs").status_code == 200
    listing = client.get("/keys/").content.decode()
    assert secret not in listing and secret.split("_", 2)[2] not in listing
    key = ApiKey.objects.get()
    row = re.search(rf'<tr data-key="{key.prefix}">(.*?)</tr>', listing, re.S).group(1)
    assert "ann" in row and "never" not in row  # used once: last used is shown
    client.post(f"/keys/t1/{key.pk}/revoke/")
    assert api.get("/api/v1/runs").status_code == 401
    assert "revoked" in client.get("/keys/").content.decode()
    assert [(t, a, b["username"]) for t, a, b in kinds("api_key.created")] == [("t1", "op", "ann")]
    assert [(t, a) for t, a, _ in kinds("api_key.revoked")] == [("t1", "op")]
    assert client.post("/keys/t2/1/revoke/").status_code == 403  # op is a viewer in t2


def test_an_invitation_link_joins_once_and_then_says_so(people, settings):
    """The page sends the email; the link's page takes a username and password, joins t1 and
    sends to the login; opened again it is 410 with the reason; a mismatched password is 400."""
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    client = signed_in("op")
    sent = client.post("/people/t1/invite/", {"email": "inv@example.com", "role": "approver"}, follow=True)
    assert "Invitation sent to inv@example.com" in flashes(sent)
    assert "inv@example.com" in sent.content.decode()  # listed as open
    link = re.search(r"http://[^\s]+/invite/[^\s]+/", mail.outbox[0].body).group(0)
    path = link.split("://", 1)[1].split("/", 1)[1]
    guest = Client()
    form = guest.get(f"/{path}")
    assert form.status_code == 200 and "t1" in form.content.decode()
    assert form.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
    mismatch = guest.post(
        f"/{path}", {"username": "inv", "password1": "a-long-pass-4711", "password2": "other"}
    )
    assert mismatch.status_code == 400 and not User.objects.filter(username="inv").exists()
    joined = guest.post(
        f"/{path}", {"username": "inv", "password1": "a-long-pass-4711", "password2": "a-long-pass-4711"}
    )
    assert joined.status_code == 302 and joined.url == "/login/"
    assert Membership.objects.get(user__username="inv", tenant__slug="t1").role == Role.APPROVER
    again = Client().get(f"/{path}")
    assert again.status_code == 410 and "has been used or has expired" in again.content.decode()
    assert [(t, a) for t, a, _ in kinds("member.joined")] == [("t1", "inv")]


def test_a_sign_in_is_audited_in_each_tenant_of_the_person(people):
    """Logging in through the console's page writes auth.signed_in into t1 and t2 (op is in
    both), naming the address; a failed login writes none."""
    client = Client(REMOTE_ADDR="198.51.100.4")
    client.post("/login/", {"username": "op", "password": "wrong"})
    assert not kinds("auth.signed_in")
    assert client.post("/login/", {"username": "op", "password": "pw-op-123456"}).status_code == 302
    assert kinds("auth.signed_in") == [
        ("t1", "op", {"username": "op", "address": "198.51.100.4"}),
        ("t2", "op", {"username": "op", "address": "198.51.100.4"}),
    ]
    page = signed_in("op").get("/people/").content.decode()
    assert re.search(r'data-member="op".*?<time datetime=', page, re.S)  # last sign-in shown


@pytest.mark.parametrize(("who", "shown"), [("viewer", False), ("ann", True), ("op", True)])
def test_the_bulk_bar_shows_only_to_who_may_decide(people, who, shown):
    """A viewer's inbox has no bulk decision form and no Approve/Deny selected buttons."""
    page = signed_in(who).get("/").content.decode()
    assert ('id="bulk-decide"' in page) is shown
    assert ("Approve selected" in page) is shown and ("Deny selected" in page) is shown
