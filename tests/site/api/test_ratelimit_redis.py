"""Rate limits on Redis (several web processes share it): one pipelined INCR per count, same limits."""

from __future__ import annotations

import os
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.core.cache import caches

from tenants import ratelimit

from .test_auth_failures import _from
from .test_errors import assert_error

REDIS_URL = os.environ.get("KEELGATE_TEST_REDIS", "redis://127.0.0.1:6379/12")


@pytest.fixture
def redis_cache(settings):
    """The default cache on Redis, under a prefix of this test's own."""
    import redis

    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
    except Exception as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"Redis is not reachable at {REDIS_URL}: required when CI=true")
        pytest.skip(f"Redis is not reachable at {REDIS_URL} ({type(exc).__name__})")
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": f"kg-test-{uuid.uuid4().hex}",
        }
    }
    backend = caches["default"]
    yield backend
    client = backend._cache.get_client(write=True)
    for key in client.scan_iter(f"{settings.CACHES['default']['KEY_PREFIX']}:*"):
        client.delete(key)


def test_a_key_past_its_limit_is_429_on_redis_and_the_count_expires(api, keys, settings, redis_cache):
    """Three requests pass, the fourth is 429 rate_limited; the count carries a TTL past the window."""
    settings.KEELGATE_API_RATE_LIMIT = 3
    client = api(keys.t1)
    for _ in range(3):
        assert client.get("/runs").status_code == 200
    response = client.get("/runs")
    assert_error(response, 429, "rate_limited")
    assert 1 <= int(response["Retry-After"]) <= settings.KEELGATE_API_RATE_WINDOW
    assert api(keys.t2).get("/runs").status_code == 200
    raw = redis_cache._cache.get_client(write=True)
    (slot,) = [
        k for k in raw.scan_iter("*ratelimit:key:*") if settings.CACHES["default"]["KEY_PREFIX"].encode() in k
    ][:1]
    assert 0 < raw.ttl(slot) <= settings.KEELGATE_API_RATE_WINDOW + 5


def test_failed_authentications_are_counted_and_checked_on_redis(keys, settings, redis_cache):
    """The failure count written by INCR is the one the check reads: past it, 429 even with a good key."""
    settings.KEELGATE_API_AUTH_FAILURE_LIMIT = 3
    for n in range(3):
        assert_error(_from("203.0.113.9", f"kg_nope_{n}").get("/api/v1/runs"), 401, "unauthenticated")
    assert_error(_from("203.0.113.9", keys.t1).get("/api/v1/runs"), 429, "auth_rate_limited")
    assert _from("198.51.100.9", keys.t1).get("/api/v1/runs").status_code == 200


def test_concurrent_counts_on_redis_never_share_a_number(redis_cache):
    """40 counts of one slot from 8 threads get 1..40, each once: no two can both take the last slot."""
    slot = f"keelgate:ratelimit:key:{uuid.uuid4().hex}:60:1"
    with ThreadPoolExecutor(max_workers=8) as threads:
        counts = list(threads.map(lambda _: ratelimit._count(slot, 60), range(40)))
    assert sorted(counts) == list(range(1, 41))


def test_a_count_is_one_round_trip_on_redis(redis_cache, monkeypatch):
    """The count goes as one pipeline (INCR, EXPIRE), not Django's add + incr."""
    client_class = type(redis_cache._cache.get_client(write=True))
    sent: list[str] = []
    real = client_class.execute_command

    def spy(self, *args, **options):
        sent.append(str(args[0]))
        return real(self, *args, **options)

    monkeypatch.setattr(client_class, "execute_command", spy)
    assert ratelimit._count(f"keelgate:ratelimit:key:{uuid.uuid4().hex}:60:1", 60) == 1
    assert sent == []  # nothing sent command by command: the pipeline sends both at once


def test_counts_from_new_threads_share_the_process_connections(redis_cache, monkeypatch):
    """Daphne runs each request in a new thread: 20 counts from 20 new threads open at most
    2 connections to Redis, not one each (Django's per-thread cache would)."""
    import threading

    import redis.connection

    connects: list[int] = []
    real = redis.connection.AbstractConnection.connect

    def counted(self):
        if self._sock is None:  # a pooled connection already open is "connected" again for free
            connects.append(1)
        return real(self)

    monkeypatch.setattr(redis.connection.AbstractConnection, "connect", counted)
    slot = f"keelgate:ratelimit:key:{uuid.uuid4().hex}:60:1"
    ratelimit._count(slot, 60)
    connects.clear()
    for _ in range(20):
        thread = threading.Thread(target=ratelimit.auth_failure_check, kwargs={"address": "192.0.2.1"})
        thread.start()
        thread.join()
        thread = threading.Thread(target=ratelimit._count, args=(slot, 60))
        thread.start()
        thread.join()
    assert len(connects) <= 2
    assert ratelimit._count(slot, 60) == 22
