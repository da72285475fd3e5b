"""Fixtures of the webhook tests: receivers on loopback, which only these settings allow."""

from __future__ import annotations

import json

import pytest

from tests.site.notifications._receiver import Receiver

FAST_RETRIES = [0.05] * 8
"""Nine attempts in all, each retry a moment after the last failure."""


@pytest.fixture(autouse=True)
def _webhook_settings(settings):
    """Loopback (IPv4) is the one non-public network allowed; retries come at once."""
    settings.KEELGATE_WEBHOOK_ALLOW_PRIVATE = False
    settings.KEELGATE_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    settings.KEELGATE_WEBHOOK_RETRY_SCHEDULE = FAST_RETRIES
    settings.KEELGATE_WEBHOOK_TIMEOUT_SECONDS = 5.0
    settings.KEELGATE_WEBHOOK_LEASE_SECONDS = 6.0
    settings.KEELGATE_WEBHOOK_WORKERS = 1
    settings.KEELGATE_CONSOLE_URL = "https://console.example.test"


@pytest.fixture
def receivers():
    """``receivers(policy=...)`` starts a receiver; all are closed after the test."""
    started: list[Receiver] = []

    def start(**kwargs) -> Receiver:
        receiver = Receiver(**kwargs)
        started.append(receiver)
        return receiver

    yield start
    for receiver in started:
        receiver.close()


def pytest_terminal_summary(terminalreporter):
    """The Slack tests' figures, summed over the run (each test records its own, on any worker)."""
    totals = {"requests": 0, "decisions": 0, "duplicates": 0, "lost": 0}
    refusals: dict[str, int] = {}
    seen = False
    for reports in terminalreporter.stats.values():
        for report in reports:
            if getattr(report, "when", None) != "teardown":
                continue
            for name, value in getattr(report, "user_properties", []):
                if name != "slack_figures":
                    continue
                seen = True
                figures = json.loads(value)
                for key in totals:
                    totals[key] += figures[key]
                for reason, count in figures["refusals"].items():
                    refusals[reason] = refusals.get(reason, 0) + count
    if seen:
        terminalreporter.write_sep("-", "Slack figures")
        terminalreporter.write_line(
            f"requests {totals['requests']}, decisions {totals['decisions']},"
            f" duplicates {totals['duplicates']}, lost {totals['lost']}"
        )
        for reason, count in sorted(refusals.items()):
            terminalreporter.write_line(f"refused {reason}: {count}")
