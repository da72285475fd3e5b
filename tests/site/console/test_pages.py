"""The console's pages: login, the inbox, runs, a run, the audit chain (SQLite and PostgreSQL)."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from approvals.services import approval_decide
from runs.models import Run, RunStatus
from runs.services import run_start
from tests.site._audit import logged

from .._asgi import asgi_get
from .conftest import PASSWORD, drain, start_waiting

pytestmark = pytest.mark.django_db(transaction=True)


def test_every_page_needs_a_login(waiting):
    """An anonymous visitor is sent to the login page from every console page."""
    client = Client()
    for url in ["/", "/runs/", "/runs/t1/r1/", "/audit/", "/audit/t1/"]:
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/login/"), url


def test_login_then_logout(people):
    """The login form logs in and lands on the inbox; logout is a POST that ends the session."""
    client = Client()
    page = client.get("/login/")
    assert page.status_code == 200 and b'name="password"' in page.content
    bad = client.post("/login/", {"username": "bob", "password": "nope"})
    assert bad.status_code == 200 and b"did not match" in bad.content
    response = client.post("/login/", {"username": "bob", "password": PASSWORD})
    assert response.status_code == 302 and response["Location"] == "/"
    assert client.get("/").status_code == 200
    assert client.get("/logout/").status_code == 405
    assert client.post("/logout/").status_code == 302
    assert client.get("/").status_code == 302


def test_the_inbox_shows_a_pending_approval_with_everything_a_person_needs(waiting, as_user):
    """Tenant, agent, run link, tool, pretty-printed arguments, why, age and expiry, decide forms."""
    html = as_user("bob").get("/").content.decode()
    item = html[html.index(f'id="item-a-{waiting.pk}"') :]
    item = item[: item.index("</article>")]
    assert "place_order" in item and "paper-trader" in item and "t1" in item
    assert 'href="/runs/t1/r1/"' in item
    assert "&quot;quantity&quot;: 10" in item and "&quot;symbol&quot;: &quot;ACME&quot;" in item
    assert "Orders move money: a person must approve." in item
    assert "data-age" in item and "Expires" in item and "then to admins" in item
    assert f'action="/approvals/{waiting.pk}/approve/"' in item
    assert f'action="/approvals/{waiting.pk}/deny/"' in item
    assert 'name="csrfmiddlewaretoken"' in item
    assert 'id="nav-count-approvals"' in html and re.search(r"approvals waiting: </span>1<", html)


def test_the_inbox_lists_oldest_first_and_only_the_users_tenants(waiting, people, as_user):
    """Without deadlines the longest-waiting approval comes first; another tenant's user sees none."""
    newer = start_waiting(people["op"], "r2")
    html = as_user("op").get("/").content.decode()
    assert html.index(f"item-a-{waiting.pk}") < html.index(f"item-a-{newer.pk}")
    other = as_user("eve").get("/").content.decode()
    assert "item-a-" not in other and "Nothing waits for approval." in other


def test_a_viewer_sees_the_inbox_without_decision_forms(waiting, as_user):
    """The viewer role can look but is offered no approve or deny form."""
    html = as_user("viewer").get("/").content.decode()
    assert f"item-a-{waiting.pk}" in html
    assert "/approve/" not in html and "/deny/" not in html
    assert "can look, not decide" in html


def test_the_runs_list_filters_by_status_agent_and_stop_reason(waiting, people, as_user):
    """Filters narrow the list; an unknown filter value is ignored, not an error."""
    run_start(tenant_id="t1", agent="paper-trader", goal="sell 2 BETA", user=people["op"], run_id="q1")
    client = as_user("op")
    both = client.get("/runs/").content.decode()
    assert "/runs/t1/r1/" in both and "/runs/t1/q1/" in both
    waiting_only = client.get("/runs/", {"status": "waiting"}).content.decode()
    assert "/runs/t1/r1/" in waiting_only and "/runs/t1/q1/" not in waiting_only
    queued = client.get("/runs/", {"status": "queued", "agent": "paper-trader"}).content.decode()
    assert "/runs/t1/q1/" in queued and "/runs/t1/r1/" not in queued
    by_reason = client.get("/runs/", {"stop_reason": "approval_pending"}).content.decode()
    assert "/runs/t1/r1/" in by_reason and "/runs/t1/q1/" not in by_reason
    assert client.get("/runs/", {"status": "<bogus>"}).status_code == 200
    assert "/runs/t1/" not in as_user("eve").get("/runs/").content.decode()


def test_the_run_page_shows_the_timeline_budgets_and_stop_reason(waiting, as_user):
    """Checkpoints with phase, actions with status, outputs, and usage against limits as bars."""
    html = as_user("op").get("/runs/t1/r1/").content.decode()
    assert 'id="run-status"' in html and "approval_pending" in html
    assert re.search(r'<li class="checkpoint" id="cp-1">', html)
    assert "get_quote" in html and "status status-done" in html and "awaiting_approval" in html
    assert "&quot;price&quot;: 101.5" in html  # the quote's output, pretty-printed and escaped
    assert re.search(r'<meter min="0" max="5" value="1"', html)  # iterations 1 of 5
    assert "Waiting for a person" in html and "updates live" in html
    status = as_user("op").get("/runs/t1/r1/status/")
    assert (
        status.status_code == 200 and b'data-live-run="t1/r1" hx-get="/runs/t1/r1/status/"' in status.content
    )


def test_a_budget_stop_resumes_with_larger_limits_from_the_run_page(people, brokerage_path, as_user):
    """max_iterations=1 stops after approval; the page offers a larger budget; the run finishes."""
    approval = start_waiting(people["op"], "b1", limits={"max_iterations": 1})
    approval_decide(tenant_id="t1", approval_id=approval.pk, user=people["op"], decision="approve")
    drain()
    run = Run.objects.get(run_id="b1")
    assert run.status == RunStatus.STOPPED and run.stop_reason == "max_iterations"
    client = as_user("bob")
    html = client.get("/runs/t1/b1/").content.decode()
    assert "limit reached" in html and "Resume with a larger budget" in html
    assert 'name="max_iterations" inputmode="decimal" value="2"' in html
    assert as_user("viewer").get("/runs/t1/b1/").content.decode().count("/resume/") == 0
    bad = client.post("/runs/t1/b1/resume/", {"max_iterations": "many"})
    assert bad.status_code == 303 and Run.objects.get(run_id="b1").status == RunStatus.STOPPED
    response = client.post("/runs/t1/b1/resume/", {"max_iterations": "3"})
    assert response.status_code == 303 and response["Location"] == "/runs/t1/b1/"
    assert Run.objects.get(run_id="b1").pending_limits == {"max_iterations": 3}
    drain()
    assert Run.objects.get(run_id="b1").status == RunStatus.DONE
    again = client.post("/runs/t1/b1/resume/", {"max_iterations": "9"}, follow=True)
    assert b"Not resumed: the run is done, and only a stopped run can be resumed." in again.content
    assert as_user("viewer").post("/runs/t1/b1/resume/", {"max_iterations": "9"}).status_code == 403


def test_the_audit_page_pages_the_chain_and_verify_reports_intact(waiting, as_user):
    """Newest event first, older pages by number; Verify says intact with the head number."""
    client = as_user("viewer")
    head = logged().filter(tenant_id="t1").order_by("-seq").first()
    html = client.get("/audit/t1/").content.decode()
    assert html.index(f'id="ev-{head.seq}"') < html.index('id="ev-1"')
    assert "approval.requested" in html
    older = client.get("/audit/t1/", {"before": 3}).content.decode()
    assert 'id="ev-2"' in older and 'id="ev-3"' not in older
    response = client.post("/audit/t1/verify/", follow=True)
    assert f"intact: {head.seq} events, head seq {head.seq}".encode() in response.content
    assert client.get("/audit/").status_code == 302  # one tenant: straight to its chain


def test_verify_names_the_first_broken_event(waiting, as_user):
    """An event edited behind the store's back is reported as the first break, linked."""
    logged().filter(tenant_id="t1", seq=2).update(actor="mallory")
    client = as_user("op")
    response = client.post("/audit/t1/verify/")
    assert response.status_code == 303 and response["Location"].endswith("?before=3#ev-2")
    page = client.get(response["Location"]).content.decode()
    assert "BROKEN at seq 2 (leaf_mismatch)" in page


def test_static_files_are_local_and_served_by_the_asgi_app(people):
    """Pages load htmx and the ws extension from /static/, and the ASGI app serves them."""
    from keelgate_site.asgi import application

    html = Client().get("/login/").content.decode()
    sources = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert "/static/vendor/htmx.min.js" in sources and "/static/vendor/htmx-ext-ws.min.js" in sources
    assert not [s for s in sources if s.startswith(("http:", "https:", "//"))]

    for path in [
        "/static/vendor/htmx.min.js",
        "/static/vendor/htmx-ext-ws.min.js",
        "/static/console/console.js",
    ]:
        response = asgi_get(application, path)
        assert response["status"] == 200 and len(response["body"]) > 1000, path


def test_an_htmx_request_after_the_session_ended_redirects_the_whole_page(waiting):
    """A polling block or a form posted by htmx without a session gets 401 and HX-Redirect to login."""
    response = Client().get("/runs/t1/r1/status/", HTTP_HX_REQUEST="true")
    assert response.status_code == 401 and response["HX-Redirect"] == "/login/"
