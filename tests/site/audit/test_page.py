"""The audit page and the API's event list show every kind of event, whatever its body."""

from __future__ import annotations

import html
import re

import pytest
from django.test import Client

from audit.kinds import EVENT_KINDS
from audit.presentation import WORDS as PAGE_WORDS
from audit.presentation import event_words
from audit.wiring import audit_log
from tenants.api_keys import api_key_create
from tenants.models import Membership, Role, Tenant

from .every_kind import BODIES, HOSTILE, RUN, WORDS, append_every_kind

pytestmark = pytest.mark.django_db


def _rows(page: str) -> dict[int, str]:
    """Each table row of the page by its event number."""
    return {int(seq): row for seq, row in re.findall(r'<tr id="ev-(\d+)"(.*?)</tr>', page, re.S)}


def _viewer(operator) -> Client:
    client = Client()
    client.force_login(operator.__class__.objects.get(username="viewer"))
    return client


def test_the_page_shows_one_event_of_every_kind_with_its_words(operator):
    """200 with a row per kind: the kind, its sentence, a run link only where the body names a run."""
    append_every_kind("t1")
    client = _viewer(operator)
    response = client.get("/audit/t1/")
    assert response.status_code == 200
    page = response.content.decode()
    rows = _rows(page)
    assert len(rows) == len(EVENT_KINDS)
    by_kind = {re.search(r'data-kind="([^"]+)"', row).group(1): row for row in rows.values()}
    assert set(by_kind) == set(EVENT_KINDS)
    for kind, row in by_kind.items():
        words = html.unescape(re.search(r'class="event-words">(.*?)</span>', row, re.S).group(1))
        assert words == event_words(kind, BODIES[kind]) and words, kind
        has_run = f'href="/runs/t1/{RUN}/"' in row
        assert has_run == ("run_id" in BODIES[kind]), kind
        assert EVENT_KINDS[kind].meaning in html.unescape(row)
    for kind, said in WORDS.items():
        assert said in html.unescape(by_kind[kind])
    assert HOSTILE not in page and html.escape(HOSTILE) in page  # shown as text, never as markup
    assert client.get("/audit/").status_code == 302  # one tenant: straight to the chain


def test_every_kind_has_words_and_missing_fields_never_fail_the_page(operator, monkeypatch):
    """An empty body of each kind, a kind no version lists, and a run_id that is not text: still 200."""
    monkeypatch.setattr("audit.views.PAGE_SIZE", 2 * len(EVENT_KINDS) + 2)  # all of them on one page
    assert set(PAGE_WORDS) == set(EVENT_KINDS)
    append_every_kind("t1", empty_too=True)
    log = audit_log()
    log.append("t1", actor="x", kind="future.kind", body={"run_id": ["not", "text"], "n": 1})
    log.append("t1", actor="x", kind="run.status", body={"run_id": "x" * 200, "status": {"odd": True}})
    client = _viewer(operator)
    response = client.get("/audit/t1/")
    assert response.status_code == 200
    rows = _rows(response.content.decode())
    older = re.search(r'href="([^"]+)" rel="next"', response.content.decode())
    if older:  # more kinds than a page holds: the next page too
        next_page = client.get(html.unescape(older.group(1)))
        rows |= _rows(next_page.content.decode())
    assert len(rows) == 2 * len(EVENT_KINDS) + 2
    newest = max(rows)
    assert "future.kind" in rows[newest - 1] and 'href="/runs/' not in rows[newest - 1]
    assert 'href="/runs/' not in rows[newest]  # too long to be a run id


def test_a_locked_out_login_does_not_break_the_page_of_any_tenant_of_the_user(operator, settings):
    """The reported fault: wrong passwords past the limit, then /audit/ and /audit/<t>/ for each tenant."""
    Membership.objects.create(user=operator, tenant=Tenant.objects.create(slug="t2"), role=Role.VIEWER)
    stranger = Client(REMOTE_ADDR="203.0.113.7")
    for _ in range(settings.KEELGATE_LOGIN_FAILURE_LIMIT + 1):
        stranger.post("/login/", {"username": "op", "password": "wrong-guess"})
    client = Client()
    client.force_login(operator)
    index = client.get("/audit/")
    assert index.status_code == 200 and b'href="/audit/t2/"' in index.content
    for tenant in ("t1", "t2"):
        page = client.get(f"/audit/{tenant}/")
        assert page.status_code == 200, tenant
        assert "Login of op locked out from 203.0.113.7." in page.content.decode()


def test_the_api_lists_every_kind_with_its_body(operator):
    """GET /api/v1/audit/events: 200, each kind once, bodies as written; filtering by each kind works
    (the key's own ``api_key.created`` comes first, and is the one of its kind past the filter)."""
    _, key = api_key_create(by="tester", tenant=Tenant.objects.get(slug="t1"), user=operator, name="audit")
    append_every_kind("t1")
    api = Client(headers={"Authorization": f"Bearer {key}"})
    response = api.get("/api/v1/audit/events", {"limit": 500})
    assert response.status_code == 200
    items = response.json()["items"]
    assert items[0]["kind"] == "api_key.created" and items[0]["actor"] == "tester"
    items = items[1:]
    assert [item["kind"] for item in items] == list(BODIES)
    for item in items:
        assert item["body"] == {k: v for k, v in BODIES[item["kind"]].items()}
    for kind in EVENT_KINDS:
        only = api.get("/api/v1/audit/events", {"kind": kind}).json()["items"]
        assert [item["kind"] for item in only] == [kind] * (2 if kind == "api_key.created" else 1)
