"""Fixtures of the webhook tests: receivers on loopback, which only these settings allow."""

from __future__ import annotations

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
