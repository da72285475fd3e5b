"""Wrong API keys are rate limited per client address, before any key is looked at."""

from __future__ import annotations

import logging

from django.test import Client

from .conftest import BASE
from .test_errors import assert_error


def _from(address: str, key: str | None) -> Client:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return Client(REMOTE_ADDR=address, headers=headers)


def test_an_address_past_its_failures_gets_429_even_with_a_valid_key(keys, settings):
    """Three wrong keys are 401; then that address is 429 auth_rate_limited with Retry-After,
    whichever key it sends (a right guess looks like a wrong one); another address is untouched."""
    settings.KEELGATE_API_AUTH_FAILURE_LIMIT = 3
    guesser = "203.0.113.50"
    for n in range(3):
        assert_error(_from(guesser, f"kg_nope_{n}").get(f"{BASE}/runs"), 401, "unauthenticated")
    refused = _from(guesser, keys.t1).get(f"{BASE}/runs")
    body = assert_error(refused, 429, "auth_rate_limited")
    assert "failed authentications" in body["detail"]
    assert 1 <= int(refused["Retry-After"]) <= settings.KEELGATE_API_RATE_WINDOW
    assert _from("198.51.100.1", keys.t1).get(f"{BASE}/runs").status_code == 200


def test_good_keys_and_no_key_do_not_count_as_failures(keys, settings):
    """Many valid requests, and requests with no credentials at all, never trip the failure limit."""
    settings.KEELGATE_API_AUTH_FAILURE_LIMIT = 2
    address = "192.0.2.77"
    for _ in range(5):
        assert _from(address, keys.t1).get(f"{BASE}/runs").status_code == 200
        assert_error(_from(address, None).get(f"{BASE}/runs"), 401, "unauthenticated")
    assert _from(address, keys.t1).get(f"{BASE}/runs").status_code == 200


def test_the_window_ends_and_the_address_may_try_again(keys, settings, monkeypatch):
    """The count is per window: in the next one the address is served again."""
    from tenants import ratelimit

    settings.KEELGATE_API_AUTH_FAILURE_LIMIT = 1
    settings.KEELGATE_API_RATE_WINDOW = 60
    now = [1_000_000_020.0]
    monkeypatch.setattr(ratelimit.time, "time", lambda: now[0])
    address = "192.0.2.88"
    assert_error(_from(address, "kg_bad_1").get(f"{BASE}/runs"), 401, "unauthenticated")
    assert_error(_from(address, keys.t1).get(f"{BASE}/runs"), 429, "auth_rate_limited")
    now[0] += 60
    assert _from(address, keys.t1).get(f"{BASE}/runs").status_code == 200


def test_a_limited_address_is_logged_once_without_the_key(keys, settings, caplog):
    """Reaching the limit logs the address once; the guessed secrets never reach a log line."""
    settings.KEELGATE_API_AUTH_FAILURE_LIMIT = 2
    caplog.set_level(logging.DEBUG)
    for n in range(4):
        _from("192.0.2.99", f"kg_secretguess_{n}").get(f"{BASE}/runs")
    lines = [r.getMessage() for r in caplog.records]
    assert sum("api.auth_failures_limited address=192.0.2.99" in line for line in lines) == 1
    assert not any("secretguess" in line for line in lines)
