"""``/metrics`` for Prometheus: every process's counters, and what waits, read at scrape time.

The counters and histograms (``sitekit.metrics``) come from the files every process on
this host writes (prometheus-client multiprocess mode). The gauges of what waits for a
person are the database's truth at this moment, so this collector asks it at each
scrape: three grouped queries, whatever the number of tenants, runs or approvals.

Never public by default: without ``KEELGATE_METRICS_TOKEN`` the page does not exist
(404); with it, a request needs ``Authorization: Bearer <token>`` (401 otherwise) and,
if ``KEELGATE_METRICS_ALLOWED_NETWORKS`` is set, an address inside one of them (403).
"""

from __future__ import annotations

import hmac
import ipaddress
import os
from collections.abc import Iterator
from datetime import datetime

from django.conf import settings
from django.db.models import Count, Min
from django.http import Http404, HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from approvals.models import Approval, ApprovalStatus, UnknownOutcome
from tenants.models import Tenant

OTHER_TENANTS = "_other"
"""The label of the tenants past ``KEELGATE_METRICS_MAX_TENANTS``, added up."""


class WaitingCollector(Collector):
    """Pending approvals, unknown outcomes and the oldest waiting approval, per tenant."""

    def collect(self) -> Iterator[Metric]:
        now = timezone.now()
        pending = {
            row["tenant_id"]: (row["n"], row["oldest"])
            for row in Approval.objects.filter(status=ApprovalStatus.PENDING)
            .values("tenant_id")
            .annotate(n=Count("id"), oldest=Min("requested_at"))
            .order_by()
        }
        unknown = {
            row["tenant_id"]: row["n"]
            for row in UnknownOutcome.objects.filter(settled=False)
            .values("tenant_id")
            .annotate(n=Count("id"))
            .order_by()
        }
        limit = settings.KEELGATE_METRICS_MAX_TENANTS
        waiting = sorted(
            set(pending) | set(unknown), key=lambda t: (-(pending.get(t, (0,))[0] + unknown.get(t, 0)), t)
        )
        shown = waiting[:limit]
        if len(shown) < limit:  # quiet tenants too, at zero, so an alert sees the series exist
            quiet = Tenant.objects.exclude(slug__in=shown).order_by("slug").values_list("slug", flat=True)
            shown += list(quiet[: limit - len(shown)])
        rest = waiting[limit:]

        approvals = GaugeMetricFamily(
            "keelgate_approvals_pending", "Approvals waiting for a decision, per tenant.", labels=["tenant"]
        )
        unknowns = GaugeMetricFamily(
            "keelgate_unknown_outcomes",
            "Unknown outcomes waiting for a person to settle, per tenant.",
            labels=["tenant"],
        )
        oldest = GaugeMetricFamily(
            "keelgate_oldest_pending_approval_age_seconds",
            "Age of the oldest approval still waiting, per tenant (0 when none waits).",
            labels=["tenant"],
        )
        groups: list[tuple[str, list[str]]] = [(t, [t]) for t in shown]
        if rest:
            groups.append((OTHER_TENANTS, rest))
        for label, members in groups:
            count = sum(pending.get(t, (0, None))[0] for t in members)
            starts: list[datetime] = [p[1] for t in members if (p := pending.get(t)) and p[1] is not None]
            approvals.add_metric([label], count)
            unknowns.add_metric([label], sum(unknown.get(t, 0) for t in members))
            oldest.add_metric([label], max(0.0, (now - min(starts)).total_seconds()) if starts else 0.0)
        yield approvals
        yield unknowns
        yield oldest


def _allowed(address: str) -> bool:
    networks = settings.KEELGATE_METRICS_ALLOWED_NETWORKS
    if not networks:
        return True
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in ipaddress.ip_network(n, strict=False) for n in networks)


def scrape() -> bytes:
    """The exposition text: this host's processes' counters and the database's gauges."""
    registry = CollectorRegistry(auto_describe=False)
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        MultiProcessCollector(registry, path=settings.KEELGATE_METRICS_DIR)  # type: ignore[no-untyped-call]  # untyped in prometheus-client
        registry.register(WaitingCollector())
        return generate_latest(registry)
    # One process only (no metrics directory): its own counters, then the gauges.
    return generate_latest(REGISTRY) + generate_latest(_with(registry, WaitingCollector()))


def _with(registry: CollectorRegistry, collector: Collector) -> CollectorRegistry:
    registry.register(collector)
    return registry


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """Prometheus text format, for a scraper holding the bearer token."""
    token = settings.KEELGATE_METRICS_TOKEN
    if not token:
        raise Http404("no metrics here")
    if not _allowed(str(request.META.get("REMOTE_ADDR", ""))):  # the peer, never X-Forwarded-For
        return HttpResponse("forbidden\n", status=403, content_type="text/plain")
    given = request.headers.get("Authorization", "")
    if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
        response = HttpResponse("unauthorized\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(scrape(), content_type=CONTENT_TYPE_LATEST)
