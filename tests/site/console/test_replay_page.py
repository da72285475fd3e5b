"""The run page offers a replay of the run and shows its report."""

from __future__ import annotations

from approvals.models import Approval
from approvals.services import approval_decide
from tests.site.console.conftest import drain


def test_a_finished_run_replays_identically_from_its_page(waiting, people, as_user):
    """Approved and done, the run replays with no divergence; the page says so."""
    approval = Approval.objects.get(run_id="r1")
    approval_decide(tenant_id="t1", approval_id=approval.pk, user=people["op"], decision="approve")
    drain()
    assert "/runs/t1/r1/replay/" in as_user("op").get("/runs/t1/r1/").content.decode()
    html = as_user("op").get("/runs/t1/r1/replay/").content.decode()
    assert "Identical" in html and "divergence" in html


def test_a_run_waiting_for_a_person_is_not_replayable(waiting, as_user):
    """An action still awaiting approval has no recorded result: the page says it cannot replay."""
    html = as_user("op").get("/runs/t1/r1/replay/").content.decode()
    assert "Not replayable" in html


def test_another_tenants_run_cannot_be_replayed(waiting, as_user):
    """A user of tenant t2 gets 404 for t1's replay page."""
    assert as_user("eve").get("/runs/t1/r1/replay/").status_code == 404
