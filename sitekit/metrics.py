"""The site's Prometheus counters and histograms, counted in whichever process acts.

The worker, Daphne, ``keelgate_notify`` and the commands are different processes, so
the counters use prometheus-client's multiprocess mode: each process writes its values
to files under ``KEELGATE_METRICS_DIR`` (the settings point ``PROMETHEUS_MULTIPROC_DIR``
there before anything imports prometheus-client), and ``/metrics`` adds up every
process's files. Counters of what the audit chain records (runs started and stopped,
decisions, appends) are counted when the append commits, so they equal the chain.
The gauges of what waits are read from the database at scrape time instead
(``keelgate_site.metrics``). Labels are bounded: event kinds, stop reasons, outcomes, decisions,
registered tools, never a run, user or tenant id.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client import Counter, Histogram

__all__ = [
    "AUDIT_APPENDS",
    "AUDIT_VERIFY_FAILURES",
    "DECISIONS",
    "FENCED_WRITES_REFUSED",
    "LEASE_LOSSES",
    "RUNS_FINISHED",
    "RUNS_STARTED",
    "RUN_STOPS",
    "STEP_SECONDS",
    "TOOL_CALL_SECONDS",
    "WEBHOOK_ATTEMPTS",
    "audit_appended",
]

RUNS_STARTED = Counter("keelgate_runs_started", "Runs started (run.started appended).")
RUNS_FINISHED = Counter(
    "keelgate_runs_finished",
    "Runs that ended (done, cancelled or stopped), by what happened: completed, completed_with_edit,"
    " denied, abandoned_unknown_outcome, failed, budget_stop, cancelled (a stopped run resumed and"
    " ended again counts again).",
    ["outcome"],
)
RUN_STOPS = Counter(
    "keelgate_run_stops",
    "Times a run stopped, by stop reason (a wait for approval is a stop; goal_reached is a finish).",
    ["reason"],
)
DECISIONS = Counter(
    "keelgate_decisions",
    "Decisions recorded in the audit chain, by kind (approve, deny, edit, reconcile_executed, ...).",
    ["kind"],
)
AUDIT_APPENDS = Counter("keelgate_audit_appends", "Audit events appended and committed, by kind.", ["kind"])
AUDIT_VERIFY_FAILURES = Counter(
    "keelgate_audit_verify_failures", "Chain verifications that found a broken or tampered link."
)
LEASE_LOSSES = Counter(
    "keelgate_lease_losses", "A worker found another worker had taken over a run it was driving."
)
FENCED_WRITES_REFUSED = Counter(
    "keelgate_fenced_writes_refused", "Writes refused because the writer's lease epoch was no longer current."
)
WEBHOOK_ATTEMPTS = Counter(
    "keelgate_webhook_attempts",
    "Webhook delivery attempts by result: delivered, retry (failed, will retry), failed (gave up).",
    ["result"],
)
STEP_SECONDS = Histogram(
    "keelgate_step_seconds",
    "Duration of a loop phase (plan, verify) and of a whole drive (run).",
    ["phase"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)
TOOL_CALL_SECONDS = Histogram(
    "keelgate_tool_call_seconds",
    "Duration of one tool call through the gateway, by tool, side effect and status.",
    ["tool", "side_effect", "status"],
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)

_DECISION_OF_KIND = {
    "approval.edited": "edit",
    "approval.expired": "expire",
    "approval.escalated": "escalate",
    "run.cancelled": "cancel",
}


def audit_appended(kind: str, body: Mapping[str, Any]) -> None:
    """Count one committed audit event, and what it records (a start, a stop, a decision)."""
    AUDIT_APPENDS.labels(kind).inc()
    if kind == "run.started":
        RUNS_STARTED.inc()
    elif kind == "run.status" and body.get("outcome"):
        RUNS_FINISHED.labels(str(body["outcome"])).inc()
    elif kind == "run.stopped":
        RUN_STOPS.labels(str(body.get("reason", ""))).inc()
    elif kind == "approval.decided":
        DECISIONS.labels(str(body.get("decision", ""))).inc()
    elif kind == "loop.reconciled":
        DECISIONS.labels(f"reconcile_{body.get('verdict', '')}").inc()
    elif kind in _DECISION_OF_KIND:
        DECISIONS.labels(_DECISION_OF_KIND[kind]).inc()
