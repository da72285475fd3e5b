"""Every run that ends says what really happened: each outcome driven through the API, then read
back through ``GET /runs`` (field and filter), ``GET /runs/{id}``, the runs list and the run page.

The paper trader runs for real (a worker drains the queue, a person decides through the API);
``failed`` comes from an agent whose planner breaks, as an untrusted planner may.
"""

from __future__ import annotations

import dataclasses
import re

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from prometheus_client import REGISTRY

from approvals.models import UnknownOutcome
from keelgate.loop import Plan, PlanRequest
from runs.agents import Agent
from runs.agents.brokerage import PaperBrokerage
from runs.agents.paper_trader import build_agent
from runs.models import Run
from runs.outcomes import RunOutcome
from tests.site._audit import logged
from tests.site.api.conftest import drain

ORDER = {"agent": "paper-trader", "goal": "buy 20 ACME"}


class BrokenPlanner:
    """A planner that raises: an untrusted planner failing stops the run on an error."""

    def plan(self, request: PlanRequest) -> Plan:
        raise RuntimeError("the model endpoint is down")


def build_broken() -> Agent:
    """paper-trader whose planner always fails."""
    return dataclasses.replace(build_agent(), name="broken-planner", planner=BrokenPlanner())


@pytest.fixture
def agents(settings):
    settings.KEELGATE_AGENTS = {
        **settings.KEELGATE_AGENTS,
        "broken-planner": "tests.site.api.test_run_outcomes.build_broken",
    }


def _waiting(client, run_id: str, **extra) -> dict:
    """Start a run through the API and drive it until its order waits; its approval."""
    assert client.post("/runs", {**ORDER, "run_id": run_id, **extra}).status_code == 201
    drain()
    (approval,) = [a for a in client.get("/approvals").json()["items"] if a["run_id"] == run_id]
    return approval


def _approve(client, approval: dict, **body) -> None:
    response = client.post(
        f"/approvals/{approval['id']}/approve", {"arguments_hash": approval["arguments_hash"], **body}
    )
    assert response.status_code == 200, response.content


def _drive_every_outcome(client) -> dict[str, str]:
    """One run ending each way, through the API; run id -> the outcome it must have."""
    _approve(client, _waiting(client, "r-completed"))
    drain()

    edited = _waiting(client, "r-edited")
    _approve(client, edited, arguments={"symbol": "ACME", "side": "buy", "quantity": 15})
    drain()

    denied = _waiting(client, "r-denied")
    assert client.post(f"/approvals/{denied['id']}/deny", {"note": "not today"}).status_code == 200
    drain()

    _waiting(client, "r-cancelled")
    assert client.post("/runs/r-cancelled/cancel", {"note": "wrong symbol"}).status_code == 200

    _approve(client, _waiting(client, "r-abandoned"))
    PaperBrokerage().set_mode("fail")
    drain()
    PaperBrokerage().set_mode("normal")
    unknown = UnknownOutcome.objects.get(tenant_id="t1", run_id="r-abandoned")
    settled = client.post(
        f"/runs/r-abandoned/actions/{unknown.action_id}/reconcile",
        {"executed": False, "note": "not in the ledger"},
    )
    assert settled.status_code == 200, settled.content
    drain()

    _approve(client, _waiting(client, "r-budget", stop={"max_iterations": 1}))
    drain()

    assert (
        client.post(
            "/runs", {"agent": "broken-planner", "goal": "buy 1 ACME", "run_id": "r-failed"}
        ).status_code
        == 201
    )
    drain()

    assert client.post("/runs", {**ORDER, "run_id": "r-waiting"}).status_code == 201
    drain()
    return {
        "r-completed": RunOutcome.COMPLETED,
        "r-edited": RunOutcome.COMPLETED_WITH_EDIT,
        "r-denied": RunOutcome.DENIED,
        "r-cancelled": RunOutcome.CANCELLED,
        "r-abandoned": RunOutcome.ABANDONED_UNKNOWN_OUTCOME,
        "r-budget": RunOutcome.BUDGET_STOP,
        "r-failed": RunOutcome.FAILED,
    }


@pytest.fixture
def ended(client, agents, brokerage_path) -> dict[str, str]:
    return _drive_every_outcome(client)


def test_every_outcome_is_the_runs_field_and_its_filter(client, ended):
    """GET /runs: each run's ``outcome`` (null while it waits); ``?outcome=`` finds that run alone."""
    items = {r["run_id"]: r for r in client.get("/runs", {"limit": 50}).json()["items"]}
    assert {run_id: items[run_id]["outcome"] for run_id in ended} == ended
    assert items["r-waiting"]["outcome"] is None and items["r-waiting"]["status"] == "waiting"
    assert set(RunOutcome.values) == set(ended.values())  # every outcome is driven here
    for run_id, outcome in ended.items():
        listed = client.get("/runs", {"outcome": outcome}).json()["items"]
        assert [r["run_id"] for r in listed] == [run_id], outcome
    # The engine's stop reasons stay as they are: a denial is still the loop's goal_reached.
    assert items["r-denied"]["stop_reason"] == "goal_reached" and items["r-denied"]["status"] == "done"
    assert (
        items["r-budget"]["stop_reason"] == "max_iterations" and items["r-failed"]["stop_reason"] == "error"
    )


def test_each_run_that_ends_counts_once_under_its_outcome(client, agents, brokerage_path):
    """``keelgate_runs_finished_total{outcome}``: one per ending, counted as its event commits."""

    def counts() -> dict[str, float]:
        return {
            o: REGISTRY.get_sample_value("keelgate_runs_finished_total", {"outcome": o}) or 0.0
            for o in RunOutcome.values
        }

    before = counts()
    _drive_every_outcome(client)
    after = counts()
    assert {o: after[o] - before[o] for o in RunOutcome.values} == dict.fromkeys(RunOutcome.values, 1.0)


def test_an_unknown_outcome_filter_is_422_invalid_input(client):
    """``?outcome=goal_reached`` (a stop reason, not an outcome) is refused, naming the parameter."""
    for value in ["goal_reached", "success", "", "DENIED"]:
        response = client.get("/runs", {"outcome": value})
        assert response.status_code == 422, value
        assert response.json()["code"] == "invalid_input" and "query.outcome" in response.json()["detail"]


def test_a_run_says_who_decided_its_outcome_and_why(client, ended):
    """GET /runs/{id}: the denier and their note, who cancelled and why, who abandoned, each edit."""

    def detail(run_id: str) -> dict:
        body = client.get(f"/runs/{run_id}").json()
        assert body["outcome"] == ended[run_id]
        return body["outcome_detail"]

    denied = detail("r-denied")
    assert (denied["by"], denied["note"]) == ("op", "not today")
    assert denied["summary"] == "Denied by op: place_order never ran."
    cancelled = detail("r-cancelled")
    assert (cancelled["by"], cancelled["note"], cancelled["summary"]) == (
        "op",
        "wrong symbol",
        "Cancelled by op.",
    )
    abandoned = detail("r-abandoned")
    assert (abandoned["by"], abandoned["note"]) == ("op", "not in the ledger")
    (edit,) = detail("r-edited")["edits"]
    assert edit["by"] == "op" and edit["changes"] == {"quantity": {"old": 20, "new": 15}}
    assert edit["words"] == "op changed quantity from 20 to 15"
    assert client.get("/runs/r-edited").json()["final_answer"].startswith("Bought 15 ACME")
    assert detail("r-completed") == {"summary": "Completed as asked.", "by": None, "note": None, "edits": []}
    assert detail("r-budget")["summary"] == "Budget stop: iteration limit reached."
    assert detail("r-failed")["summary"].startswith("Failed: stopped on an error")
    assert client.get("/runs/r-waiting").json()["outcome_detail"] is None


def test_a_resumed_run_has_no_outcome_until_it_ends_again(client, ended):
    """Resuming the budget stop clears its outcome; ending again sets the new one."""
    resumed = client.post("/runs/r-budget/resume", {"stop": {"max_iterations": 5}}).json()
    assert resumed["status"] == "queued" and resumed["outcome"] is None
    assert Run.objects.get(run_id="r-budget").outcome == ""
    drain()
    assert client.get("/runs/r-budget").json()["outcome"] == "completed"


def test_the_chain_records_each_outcome_with_the_move_that_ended_the_run(client, ended):
    """Each ending ``run.status`` event carries the outcome; the other moves carry none."""
    import json

    events = [json.loads(e.body) for e in logged().filter(tenant_id="t1", kind="run.status")]
    ending = {e["run_id"]: e["outcome"] for e in events if e["status"] in ("done", "cancelled", "stopped")}
    assert ending == ended
    assert all("outcome" not in e for e in events if e["status"] in ("queued", "running", "waiting"))


def test_every_page_shows_every_outcome(client, ended):
    """The runs list (badge, filter) and each run's page (badge, answer block) for every outcome."""
    console = Client()
    console.force_login(get_user_model().objects.get(username="op"))
    page = console.get("/runs/")
    assert page.status_code == 200
    html = page.content.decode()
    for run_id, outcome in ended.items():
        row = re.search(rf'<tr data-run="t1/{run_id}">.*?</tr>', html, re.S)
        assert row and f'data-outcome="{outcome}"' in row.group(0), run_id
        filtered = console.get("/runs/rows/", {"outcome": outcome}).content.decode()
        assert re.findall(r'<tr data-run="t1/([^"]+)">', filtered) == [run_id]
        detail = console.get(f"/runs/t1/{run_id}/")
        assert detail.status_code == 200, run_id
        assert f'id="run-outcome" data-outcome="{outcome}"' in detail.content.decode(), run_id
    assert console.get("/runs/t1/r-waiting/").status_code == 200
    denied = console.get("/runs/t1/r-denied/").content.decode()
    assert "goal reached" not in denied and "Denied by op" in denied and "not today" in denied
    edited = console.get("/runs/t1/r-edited/").content.decode()
    answer = re.search(r'<pre class="text" id="final-answer">(.*?)</pre>', edited, re.S)
    assert answer and answer.group(1).startswith("Bought 15 ACME")
    assert '<span class="edit-note">(op changed quantity from 20 to 15)</span>' in answer.group(1)
    bogus = console.get("/runs/", {"outcome": "<bogus>"})
    assert bogus.status_code == 200 and len(re.findall(r'<tr data-run="t1/', bogus.content.decode())) == 8
