"""``/metrics``: never public by default, and after a small batch its numbers are the database's.

The batch runs in other processes, as in production: a "web" process starts the runs
and decides them, ``keelgate_worker`` drives them, each writing its counters to one
metrics directory; this process scrapes, adding them up, and reads the gauges of what
waits from the database at that moment.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.db.models import Count

from approvals.models import Approval, ApprovalStatus
from tests.site._audit import logged

ROOT = Path(__file__).resolve().parents[3]
TOKEN = "metrics-token-0123456789"

pytestmark = pytest.mark.slow


def scrape(client, token: str = TOKEN) -> dict[str, float]:
    """The exposition text as {'name{labels}': value}."""
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain")
    values: dict[str, float] = {}
    for line in response.content.decode().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            values[name] = float(value)
    return values


def value(values: dict[str, float], name: str, **labels: str) -> float:
    """One sample, 0 when absent; label order as prometheus-client writes it (sorted by declaration)."""
    for key, v in values.items():
        base, _, rest = key.partition("{")
        if base != name:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', rest))
        if all(found.get(k) == want for k, want in labels.items()):
            return v
    return 0.0


def total(values: dict[str, float], name: str, **labels: str) -> float:
    """The sum of every sample of ``name`` whose labels include ``labels``."""
    out = 0.0
    for key, v in values.items():
        base, _, rest = key.partition("{")
        found = dict(re.findall(r'(\w+)="([^"]*)"', rest))
        if base == name and all(found.get(k) == want for k, want in labels.items()):
            out += v
    return out


@pytest.mark.django_db
def test_metrics_is_not_there_without_a_token(client, settings):
    """No token configured: 404, whatever the request carries."""
    settings.KEELGATE_METRICS_TOKEN = ""
    assert client.get("/metrics").status_code == 404
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer anything").status_code == 404


@pytest.mark.django_db
def test_metrics_needs_the_bearer_token_and_an_allowed_address(client, settings):
    """Missing or wrong token: 401; an address outside the allow-list: 403 even with the token."""
    settings.KEELGATE_METRICS_TOKEN = TOKEN
    assert client.get("/metrics").status_code == 401
    wrong = client.get("/metrics", HTTP_AUTHORIZATION="Bearer metrics-token-0123456780")
    assert wrong.status_code == 401 and wrong["WWW-Authenticate"].startswith("Bearer")
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Basic {TOKEN}").status_code == 401
    settings.KEELGATE_METRICS_ALLOWED_NETWORKS = ["10.0.0.0/8"]
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 403
    settings.KEELGATE_METRICS_ALLOWED_NETWORKS = ["127.0.0.0/8", "::1/128"]
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 200


_START = """
from django.contrib.auth import get_user_model
from runs.services import run_start
op = get_user_model().objects.get(username="op")
for n in range(1, 4):
    run_start(tenant_id="t1", agent="paper-trader", goal=f"buy {n} ACME", user=op, run_id=f"m{n}")
"""

_DECIDE = """
from django.contrib.auth import get_user_model
from approvals.models import Approval
from approvals.services import approval_decide
op = get_user_model().objects.get(username="op")
for i, approval in enumerate(Approval.objects.filter(tenant_id="t1", status="pending").order_by("run_id")):
    decision = "deny" if i == 2 else "approve"
    approval_decide(tenant_id="t1", approval_id=approval.pk, user=op, decision=decision, note="checked")
"""


def test_a_scrape_after_a_batch_matches_the_database(operator, child_env, tmp_path, client, settings):
    """Runs started, stops by reason, decisions, appends, latencies and what waits equal the database."""
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    env = {
        **child_env,
        "KEELGATE_METRICS_DIR": str(metrics_dir),
        "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir),
    }
    settings.KEELGATE_METRICS_TOKEN = TOKEN
    settings.KEELGATE_METRICS_DIR = str(metrics_dir)
    before = logged().count()  # this process's appends (the fixtures) are not the batch's

    def manage(*args: str) -> None:
        done = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-3000:]

    manage("shell", "-c", _START)
    manage("keelgate_worker", "--once")
    waiting = scrape(client)
    pending = Approval.objects.filter(tenant_id="t1", status=ApprovalStatus.PENDING).count()
    assert pending == 3
    assert value(waiting, "keelgate_approvals_pending", tenant="t1") == pending
    assert value(waiting, "keelgate_unknown_outcomes", tenant="t1") == 0
    assert value(waiting, "keelgate_oldest_pending_approval_age_seconds", tenant="t1") > 0
    assert value(waiting, "keelgate_runs_started_total") == 3

    manage("shell", "-c", _DECIDE)
    manage("keelgate_worker", "--once")
    done = scrape(client)
    events = logged().all()
    assert total(done, "keelgate_audit_appends_total") == events.count() - before
    for row in events.values("kind").annotate(n=Count("id")):
        if row["kind"] in ("run.started", "approval.decided", "run.stopped", "gateway.call"):
            assert value(done, "keelgate_audit_appends_total", kind=row["kind"]) == row["n"], row
    assert value(done, "keelgate_runs_started_total") == events.filter(kind="run.started").count() == 3
    decided = [e.body for e in events.filter(kind="approval.decided")]
    assert (
        value(done, "keelgate_decisions_total", kind="approve") == sum('"approve"' in b for b in decided) == 2
    )
    assert value(done, "keelgate_decisions_total", kind="deny") == sum('"deny"' in b for b in decided) == 1
    stopped = [e.body for e in events.filter(kind="run.stopped")]
    for reason in ("approval_pending", "goal_reached"):
        expected = sum(f'"reason":"{reason}"' in b for b in stopped)
        assert expected > 0 and value(done, "keelgate_run_stops_total", reason=reason) == expected, reason
    assert total(done, "keelgate_run_stops_total") == len(stopped)
    orders = events.filter(kind="gateway.call", body__contains='"tool":"place_order"')
    done_orders = orders.filter(body__contains='"status":"done"').count()
    assert done_orders == 2  # the denied one never ran
    assert value(done, "keelgate_tool_call_seconds_count", tool="place_order", status="done") == done_orders
    assert value(done, "keelgate_step_seconds_count", phase="plan") > 0
    assert value(done, "keelgate_approvals_pending", tenant="t1") == 0
    assert value(done, "keelgate_oldest_pending_approval_age_seconds", tenant="t1") == 0
    assert total(done, "keelgate_lease_losses_total") == 0


@pytest.mark.django_db
def test_the_gauges_take_three_queries_and_bounded_labels(client, settings, django_assert_max_num_queries):
    """Thirty tenants: one scrape asks the database three times and shows at most the cap."""
    from tenants.models import Tenant

    Tenant.objects.bulk_create([Tenant(slug=f"g{n:02d}", name=f"G{n}") for n in range(30)])
    settings.KEELGATE_METRICS_TOKEN = TOKEN
    settings.KEELGATE_METRICS_MAX_TENANTS = 5
    with django_assert_max_num_queries(3):
        values = scrape(client)
    tenants = {
        re.search(r'tenant="([^"]*)"', k).group(1) for k in values if k.startswith("keelgate_approvals")
    }
    assert tenants == {"g00", "g01", "g02", "g03", "g04"}  # quiet tenants at zero, up to the cap
