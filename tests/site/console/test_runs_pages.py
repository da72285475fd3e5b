"""The runs pages: what happened in words, search and filters, starting a run, the timeline.

On SQLite and on PostgreSQL. Runs are driven by an in-process worker through the same
services the console and the API call.
"""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from approvals.models import UnknownOutcome
from approvals.services import approval_decide, run_cancel, unknown_reconcile
from audit.models import AuditEvent
from runs.agents.brokerage import PaperBrokerage
from runs.models import Run, RunStatus
from runs.services import run_start
from tenants.models import Membership, Role, Tenant

from .conftest import XSS_SCRIPT, drain, start_waiting

pytestmark = pytest.mark.django_db(transaction=True)


def _row(html: str, run_id: str) -> str:
    """The list's table row of one run."""
    match = re.search(rf'<tr data-run="t1/{re.escape(run_id)}">(.*?)</tr>', html, re.S)
    assert match, f"no row for {run_id}"
    return match.group(1)


def _words(html: str, run_id: str) -> str:
    match = re.search(r'class="words tone-(\w+)">([^<]*)<', _row(html, run_id))
    assert match
    return f"{match.group(1)}: {match.group(2)}"


def _approve(people, approval, who="op"):
    approval_decide(tenant_id="t1", approval_id=approval.pk, user=people[who], decision="approve")


def _unknown(people, run_id):
    """A run whose approved order failed after the brokerage filled it: an unknown outcome."""
    _approve(people, start_waiting(people["op"], run_id))
    PaperBrokerage().set_mode("fail")
    try:
        drain()
    finally:
        PaperBrokerage().set_mode("normal")
    return UnknownOutcome.objects.get(tenant_id="t1", run_id=run_id)


# -- what happened, in words -------------------------------------------------------------


def test_the_list_says_what_happened_to_each_run(people, brokerage_path, as_user):
    """Filled, denied by, settled by, abandoned, budget stop, cancelled, waiting, unknown and queued runs."""
    _approve(people, start_waiting(people["op"], "filled"))
    approval_decide(
        tenant_id="t1",
        approval_id=start_waiting(people["op"], "denied").pk,
        user=people["bob"],
        decision="deny",
        note="wrong symbol",
    )
    drain()
    settled = _unknown(people, "settled")
    unknown_reconcile(
        tenant_id="t1", item_id=settled.pk, user=people["rita"], executed=True, note="seen at the broker"
    )
    abandoned = _unknown(people, "abandoned")
    unknown_reconcile(
        tenant_id="t1", item_id=abandoned.pk, user=people["rita"], executed=False, note="not at the broker"
    )
    _approve(people, start_waiting(people["op"], "budget", limits={"max_iterations": 1}))
    start_waiting(people["op"], "cancelled")
    run_cancel(tenant_id="t1", run_id="cancelled", user=people["bob"], note="not today")
    drain()
    start_waiting(people["op"], "waiting")
    _unknown(people, "unknown")
    run_start(tenant_id="t1", agent="paper-trader", goal="buy 1 ACME", user=people["op"], run_id="queued")
    run_start(tenant_id="t1", agent="paper-trader", goal="buy 1 ACME", user=people["op"], run_id="never")
    run_cancel(tenant_id="t1", run_id="never", user=people["bob"])  # before any worker saw it

    html = as_user("viewer").get("/runs/").content.decode()
    assert _words(html, "never") == "bad: cancelled by bob"
    assert _words(html, "filled") == "ok: order filled"
    assert _words(html, "denied") == "bad: denied by bob"
    assert _words(html, "settled") == "ok: settled as executed by rita"
    assert _words(html, "abandoned") == "bad: abandoned: settled as not executed by rita"
    assert _words(html, "budget") == "bad: order filled; budget stop: iteration limit reached"
    assert _words(html, "cancelled") == "bad: place_order withdrawn; cancelled by bob"
    assert _words(html, "waiting") == "wait: waiting for approval of place_order"
    assert _words(html, "unknown") == "wait: unknown outcome of place_order: a person must settle it"
    assert _words(html, "queued") == "active: queued, not started yet"
    statuses = {r.run_id: r.status for r in Run.objects.all()}
    assert statuses["filled"] == statuses["denied"] == statuses["settled"] == RunStatus.DONE


def test_an_edited_order_says_who_edited_it(people, brokerage_path, as_user):
    """Edit, then approve: the list names the fill of the edited call, not the denied proposal."""
    approval = start_waiting(people["op"], "edited")
    approval_decide(
        tenant_id="t1",
        approval_id=approval.pk,
        user=people["op"],
        decision="approve",
        arguments={"symbol": "ACME", "side": "buy", "quantity": 4},
    )
    drain()
    html = as_user("op").get("/runs/").content.decode()
    assert _words(html, "edited") == "ok: order filled (edited by op)"


def test_a_goal_is_untrusted_text_in_the_list(people, brokerage_path, as_user):
    """A goal with markup shows escaped (the API accepts any text for an agent that reads it)."""
    Run.objects.create(
        tenant_id="t1", run_id="x", agent="paper-trader", goal=XSS_SCRIPT, as_of="2026-01-01T00:00:00Z"
    )
    html = as_user("op").get("/runs/").content.decode()
    assert XSS_SCRIPT not in html and "&lt;script&gt;" in _row(html, "x")


# -- search, filters, pages --------------------------------------------------------------


def test_search_by_run_id_and_goal_and_filter_by_status_and_agent(people, brokerage_path, as_user, settings):
    """q= finds a run id or goal fragment (any case); status and agent narrow; bogus values are ignored."""
    settings.KEELGATE_AGENTS = {
        **settings.KEELGATE_AGENTS,
        "four-eyes": "tests.site.console.agents.build_four_eyes",
    }
    op = people["op"]
    run_start(tenant_id="t1", agent="paper-trader", goal="buy 5 ACME", user=op, run_id="alpha-1")
    run_start(tenant_id="t1", agent="paper-trader", goal="sell 7 BETA", user=op, run_id="beta-2")
    run_start(tenant_id="t1", agent="four-eyes", goal="buy 9 GAMMA", user=op, run_id="gamma-3")
    drain()
    client = as_user("op")

    def listed(**query):
        html = client.get("/runs/", query).content.decode()
        return sorted(re.findall(r'<tr data-run="t1/([^"]+)">', html))

    assert listed() == ["alpha-1", "beta-2", "gamma-3"]
    assert listed(q="ALPHA") == ["alpha-1"]
    assert listed(q="beta") == ["beta-2"]
    assert listed(q="sell 7") == ["beta-2"]
    assert listed(q="  gamma  ") == ["gamma-3"]
    assert listed(q="nothing-like-it") == []
    assert listed(agent="four-eyes") == ["gamma-3"]
    assert listed(status="waiting", agent="paper-trader") == ["alpha-1", "beta-2"]
    assert listed(status="done") == []
    assert listed(status="<bogus>", agent="nobody") == ["alpha-1", "beta-2", "gamma-3"]
    assert listed(cursor="not a cursor!") == ["alpha-1", "beta-2", "gamma-3"]
    rows = client.get("/runs/rows/", {"q": "beta", "status": "waiting"})
    assert rows.status_code == 200 and b"<html" not in rows.content
    assert b'hx-get="/runs/rows/?status=waiting&amp;q=beta"' in rows.content  # the refresh keeps the filters
    assert b'data-run="t1/beta-2"' in rows.content and b'data-run="t1/alpha-1"' not in rows.content
    assert "t1/" not in as_user("eve").get("/runs/", {"q": "alpha"}).content.decode()


def test_typing_in_the_filters_moves_the_address_bar_but_a_live_refresh_does_not(people, as_user):
    """The filter form's request sets HX-Push-Url to the page's address; the table's own refresh does not."""
    client = as_user("op")
    typed = client.get("/runs/rows/", {"q": "abc"}, HTTP_HX_REQUEST="true", HTTP_HX_TRIGGER="runs-filters")
    assert typed["HX-Push-Url"] == "/runs/?q=abc"
    refresh = client.get("/runs/rows/", {"q": "abc"}, HTTP_HX_REQUEST="true", HTTP_HX_TRIGGER="runs-table")
    assert "HX-Push-Url" not in refresh


def test_the_list_pages_by_keyset_and_a_new_run_does_not_shift_older_pages(people, as_user, monkeypatch):
    """Older → follows a cursor; a run started meanwhile appears on the first page only."""
    monkeypatch.setattr("runs.views.PAGE_SIZE", 2)
    for i in range(5):
        run_start(tenant_id="t1", agent="paper-trader", goal="buy 1 ACME", user=people["op"], run_id=f"p{i}")
    client = as_user("op")
    first = client.get("/runs/").content.decode()
    assert re.findall(r'<tr data-run="t1/([^"]+)">', first) == ["p4", "p3"]
    older = re.search(r'<a href="(/runs/\?cursor=[^"]+)">Older', first).group(1)
    run_start(tenant_id="t1", agent="paper-trader", goal="buy 1 ACME", user=people["op"], run_id="p5")
    second = client.get(older.replace("&amp;", "&")).content.decode()
    assert re.findall(r'<tr data-run="t1/([^"]+)">', second) == ["p2", "p1"]
    assert "← Newest" in second


LIST_QUERIES = 8
"""Session, user, memberships, the chain heads (for the socket's catch-up), the page of runs,
their latest checkpoints, the two navigation counts."""


def test_the_list_reads_a_fixed_number_of_queries_for_a_page_of_runs(
    people, brokerage_path, as_user, django_assert_max_num_queries
):
    """One run or twenty in every state: the same queries (one for the rows, one for their checkpoints)."""
    client = as_user("op")
    _approve(people, start_waiting(people["op"], "one"))
    drain()

    def count() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert client.get("/runs/").status_code == 200
        return len(queries)

    few = count()
    for i in range(6):
        start_waiting(people["op"], f"w{i}")
    for i in range(6):
        _approve(people, start_waiting(people["op"], f"d{i}"))
    drain()
    for i in range(6):
        run_start(tenant_id="t1", agent="paper-trader", goal="buy 1 ACME", user=people["op"], run_id=f"q{i}")
    with django_assert_max_num_queries(LIST_QUERIES):
        html = client.get("/runs/").content.decode()
    assert html.count("<tr data-run=") == 19
    assert count() == few == LIST_QUERIES
    with django_assert_max_num_queries(LIST_QUERIES):
        client.get("/runs/rows/")


# -- start a run -------------------------------------------------------------------------


def _start(client, **fields):
    data = {"tenant": "t1", "agent": "paper-trader", "goal": "buy 3 ACME", "run_id": "form-1", **fields}
    return client.post("/runs/start/", data)


def test_start_a_run_from_the_console_then_its_page(people, brokerage_path, as_user):
    """An approver starts a run with limits: 303 to its page; the run is queued as the API queues it."""
    client = as_user("bob")
    html = client.get("/runs/").content.decode()
    assert 'action="/runs/start/"' in html and 'name="csrfmiddlewaretoken"' in html
    assert re.search(r'name="run_id" value="[0-9a-f]{32}"', html)  # a fresh id per form shown
    response = _start(client, max_iterations="4", timeout_seconds="600.5")
    assert response.status_code == 303 and response["Location"] == "/runs/t1/form-1/"
    run = Run.objects.get(tenant_id="t1", run_id="form-1")
    assert (run.status, run.agent, run.goal, run.created_by) == (
        RunStatus.QUEUED,
        "paper-trader",
        "buy 3 ACME",
        "bob",
    )
    assert run.limits == {"max_iterations": 4, "timeout_seconds": 600.5}
    assert AuditEvent.objects.filter(tenant_id="t1", kind="run.requested", actor="bob").count() == 1
    page = client.get("/runs/t1/form-1/").content.decode()
    assert "Started run form-1: a worker will pick it up." in page
    again = _start(client, max_iterations="4", timeout_seconds="600.5")  # the same form, sent twice
    assert again["Location"] == "/runs/t1/form-1/" and Run.objects.filter(run_id="form-1").count() == 1
    drain()
    assert Run.objects.get(run_id="form-1").status == RunStatus.WAITING


def test_a_form_with_errors_comes_back_with_what_was_typed(people, brokerage_path, as_user):
    """Bad limits, then a goal the agent cannot read: 422, errors shown, the text kept, nothing started."""
    client = as_user("op")
    response = _start(client, goal=f"buy lots of ACME {XSS_SCRIPT}", max_iterations="0", max_tokens="ten")
    html = response.content.decode()
    assert response.status_code == 422
    assert "Iterations: Input should be greater than or equal to 1." in html
    assert "Tokens must be a whole number." in html
    assert "buy lots of ACME &lt;script&gt;" in html and XSS_SCRIPT not in html  # kept, escaped
    assert (
        'name="max_iterations" inputmode="decimal" size="8" autocomplete="off" value="0" aria-invalid="true"'
        in html
    )
    assert 'value="ten"' in html and '<details class="start-run" open>' in html
    goal = _start(client, goal=f"buy lots of ACME {XSS_SCRIPT}", max_iterations="3")
    assert (
        goal.status_code == 422 and b"The agent cannot read that goal: expected a goal like" in goal.content
    )
    assert b"buy lots of ACME &lt;script&gt;" in goal.content and b'value="3"' in goal.content
    empty = _start(client, goal="", agent="")
    assert empty.status_code == 422 and b"Say what the agent should do" in empty.content
    assert b"Choose one of the registered agents." in empty.content
    unknown_agent = _start(client, agent="nobody")
    assert (
        unknown_agent.status_code == 422 and b"Choose one of the registered agents." in unknown_agent.content
    )
    assert not Run.objects.exists()


def test_a_form_whose_run_id_another_run_took_is_409_on_that_field_with_a_new_id(
    people, brokerage_path, as_user
):
    """The same form id with another goal: the console's words for run_exists, a fresh id, one run."""
    client = as_user("op")
    assert _start(client).status_code == 303
    clash = _start(client, goal="buy 4 ACME")
    html = clash.content.decode()
    assert clash.status_code == 409
    assert "This form already started another run: check it and submit again." in html
    assert 'name="run_id" value="form-1"' not in html
    assert re.search(r'name="run_id" value="[0-9a-f]{32}"', html)
    assert "buy 4 ACME" in html and Run.objects.count() == 1


def test_a_viewer_cannot_start_a_run_and_another_tenant_is_not_found(people, brokerage_path, as_user):
    """No form for a viewer and 403 if they post; a tenant one is not in is 404 (as for the API)."""
    viewer = as_user("viewer")
    assert 'action="/runs/start/"' not in viewer.get("/runs/").content.decode()
    assert _start(viewer).status_code == 403
    assert _start(as_user("op"), tenant="t2").status_code == 404
    assert _start(as_user("eve"), tenant="t1").status_code == 404
    assert not Run.objects.exists()


def test_starting_a_run_needs_the_csrf_token(people, brokerage_path):
    """A cross-site form post (no token) is refused before anything starts."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(people["op"])
    assert _start(client).status_code == 403
    assert not Run.objects.exists()


def test_someone_in_two_tenants_chooses_one(people, brokerage_path, as_user):
    """bob approves in t1 and t2: the form offers both and starts the run where he chose."""
    Membership.objects.create(user=people["bob"], tenant=Tenant.objects.get(slug="t2"), role=Role.APPROVER)
    client = as_user("bob")
    html = client.get("/runs/").content.decode()
    assert '<option value="t1">t1</option><option value="t2">t2</option>' in html
    assert _start(client, tenant="").status_code == 422
    response = _start(client, tenant="t2")
    assert response["Location"] == "/runs/t2/form-1/"
    assert Run.objects.get(run_id="form-1").tenant_id == "t2"


# -- the timeline ------------------------------------------------------------------------


def _entries(html: str) -> list[str]:
    """The timeline's action entries (each chunk runs to the next entry)."""
    return re.split(r'<li class="entry" id="action-\d+"', html)[1:]


def _lifecycle(entry: str) -> list[str]:
    steps = re.search(r'<ol class="lifecycle"[^>]*>(.*?)</ol>', entry, re.S).group(1)
    return [
        re.sub(r"<time.*?</time>|<q.*?</q>", "", s).strip()
        for s in re.findall(r"<li[^>]*>(.*?)</li>", steps, re.S)
    ]


def test_the_timeline_shows_each_action_once_with_its_lifecycle(people, brokerage_path, as_user):
    """Many checkpoints, two actions: two entries; the order reads proposed → approved by bob → done."""
    approval = start_waiting(people["op"], "life")
    approval_decide(
        tenant_id="t1", approval_id=approval.pk, user=people["bob"], decision="approve", note="ok <b>"
    )
    drain()
    html = as_user("op").get("/runs/t1/life/").content.decode()
    checkpoints = html.count('<li class="checkpoint" id="cp-')
    assert checkpoints >= 5
    assert html.count('<li class="entry" id="action-') == 2
    quote, order = _entries(html)
    assert _lifecycle(quote) == ["proposed", "done"]
    assert _lifecycle(order) == ["proposed", "approval asked", "approved by bob", "done"]
    assert "ok &lt;b&gt;" in order  # the note, escaped
    assert re.search(r"Checkpoint history \([2-9]\)", order)
    assert 'class="entry answer"' in html and "Bought 10 ACME" in html


def test_the_timeline_tells_denied_unknown_then_settled_and_cancelled(people, brokerage_path, as_user):
    """Denied by bob; unknown then settled as executed by rita; withdrawn when bob cancelled."""
    approval_decide(
        tenant_id="t1",
        approval_id=start_waiting(people["op"], "no").pk,
        user=people["bob"],
        decision="deny",
        note="too big",
    )
    drain()
    settled = _unknown(people, "maybe")
    unknown_reconcile(tenant_id="t1", item_id=settled.pk, user=people["rita"], executed=True, note="seen")
    drain()
    start_waiting(people["op"], "stop")
    run_cancel(tenant_id="t1", run_id="stop", user=people["bob"])
    client = as_user("op")
    page = client.get("/runs/t1/no/").content.decode()
    assert '<p class="words tone-bad" id="run-words">denied by bob</p>' in page  # not a green "done"
    assert 'class="status status-done tone-bad" id="run-status-value">done<' in page
    _, denied = _entries(page)
    assert _lifecycle(denied) == ["proposed", "approval asked", "denied by bob"]
    _, maybe = _entries(client.get("/runs/t1/maybe/").content.decode())
    assert _lifecycle(maybe) == [
        "proposed",
        "approval asked",
        "approved by op",
        "outcome unknown",
        "settled as executed by rita",
    ]
    _, withdrawn = _entries(client.get("/runs/t1/stop/").content.decode())
    assert _lifecycle(withdrawn) == ["proposed", "approval asked", "withdrawn: run cancelled by bob"]


def test_the_timeline_fragment_is_the_live_part_of_the_run_page(people, brokerage_path, as_user):
    """/timeline/ renders the section alone, marked to refresh when this run's events arrive."""
    start_waiting(people["op"], "frag")
    client = as_user("op")
    page = client.get("/runs/t1/frag/").content.decode()
    fragment = client.get("/runs/t1/frag/timeline/").content.decode()
    assert fragment.startswith('<section id="run-timeline"') and "<html" not in fragment
    assert (
        'data-live-refresh data-live-run="t1/frag" hx-get="/runs/t1/frag/timeline/" hx-trigger="kg:refresh"'
        in fragment
    )
    assert fragment.strip() in page
    # The socket catches up from the heads read before the page: nothing between is missed.
    head = AuditEvent.objects.filter(tenant_id="t1").order_by("-seq").values_list("seq", flat=True)[0]
    assert f'<div id="kg-since" hidden data-since="{{&quot;t1&quot;: {head}}}"></div>' in page
    assert as_user("eve").get("/runs/t1/frag/timeline/").status_code == 404
    assert Client().get("/runs/t1/frag/timeline/").status_code == 302


def test_cancel_asks_for_a_confirmation_and_the_page_then_shows_who_and_why(people, brokerage_path, as_user):
    """Without the ticked box nothing is cancelled; with it, the run page says who cancelled, when and why."""
    start_waiting(people["op"], "cx")
    bob = as_user("bob")
    page = bob.get("/runs/t1/cx/").content.decode()
    assert 'name="confirm" value="yes" required' in page and "cannot be resumed" in page
    unconfirmed = bob.post("/runs/t1/cx/cancel/", {"note": "wrong symbol"}, follow=True)
    assert "Nothing was cancelled: tick the box" in unconfirmed.content.decode()
    assert Run.objects.get(run_id="cx").status == RunStatus.WAITING
    bob.post("/runs/t1/cx/cancel/", {"note": "wrong <b>symbol</b>", "confirm": "yes"})
    assert Run.objects.get(run_id="cx").status == RunStatus.CANCELLED
    page = bob.get("/runs/t1/cx/").content.decode()
    said = page.split('class="outcome-line"')[1].split("</p>")[0]
    assert "Cancelled by bob." in said
    assert '<q class="note">wrong &lt;b&gt;symbol&lt;/b&gt;</q>' in said  # the person's words, escaped
    assert 'name="confirm"' not in page  # nothing left to cancel
