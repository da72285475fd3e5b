"""Rate limits in the Django cache: per API key, and failed authentications per address.

Each key may make ``KEELGATE_API_RATE_LIMIT`` requests per ``KEELGATE_API_RATE_WINDOW``
seconds; each client address may fail API authentication
``KEELGATE_API_AUTH_FAILURE_LIMIT`` times per window, after which every request from
it is refused until the window ends, even one with a valid key (a guesser must not
learn which guess was right). A fixed window, not a token bucket, because
``cache.add`` plus ``cache.incr`` is atomic in every Django cache backend (LocMem,
Redis, Memcached), so concurrent requests in any number of processes sharing the cache
can never both take the last slot; a token bucket would need a read-modify-write under
a lock. The price is that a client can spend up to twice the limit across a window
boundary, which is acceptable for a fairness limit and slows a guesser just as well.

On Redis (``REDIS_URL``, which several web processes need) a count is one round trip,
``INCR`` and ``EXPIRE`` pipelined, instead of Django's ``add`` plus ``incr`` (three:
``SET NX``, ``EXISTS``, ``INCRBY``), on one client per process (see :func:`_redis`).
``INCR`` is atomic, so the guarantee is the same.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any

from django.conf import settings
from django.core.cache import cache, caches
from django.http import HttpRequest

from sitekit.errors import AuthRateLimitedError, RateLimitedError

__all__ = ["auth_failure_check", "auth_failure_hit", "client_address", "ratelimit_hit"]

logger = logging.getLogger("keelgate.api")


def client_address(request: HttpRequest) -> str | None:
    """The address a request came from: Daphne's peer (``--proxy-headers`` behind a proxy).

    ``X-Forwarded-For`` is never read here: any client can send one, and a limit keyed
    on it would be dodged by changing it on every try. Also django-axes' address
    (``AXES_CLIENT_IP_CALLABLE``), so logins and the API count the same client. None
    for a request made in-process (no peer); axes stores that as no address.
    """
    address = request.META.get("REMOTE_ADDR")
    return str(address) if address else None


def _window() -> int:
    return int(getattr(settings, "KEELGATE_API_RATE_WINDOW", 60))


def _slot(name: str, window: int, now: float) -> tuple[str, int]:
    index = int(now // window)
    return f"keelgate:ratelimit:{name}:{window}:{index}", max(1, math.ceil((index + 1) * window - now))


_shared: dict[str, Any] = {}
"""One RedisCache (so one connection pool) per process and cache configuration."""
_shared_lock = threading.Lock()


def _redis(slot: str) -> tuple[Any, str] | None:
    """The Redis client and full key of ``slot`` if the default cache is Django's RedisCache.

    Django's caches are per thread, and Daphne runs each request in a thread of its own:
    through ``cache`` every request would build the backend again and open a new
    connection to Redis, a large share of an API request (docs/performance.md#redis-client). The backend
    kept here is shared by every thread (redis-py's connection pool is thread-safe).
    """
    config = settings.CACHES["default"]
    if config.get("BACKEND") != "django.core.cache.backends.redis.RedisCache":
        return None
    ident = repr(sorted(config.items()))
    backend = _shared.get(ident)
    if backend is None:
        with _shared_lock:
            backend = _shared.setdefault(ident, caches.create_connection("default"))
    key = backend.make_and_validate_key(slot)
    return backend._cache.get_client(key, write=True), key


def _count(slot: str, window: int) -> int | None:
    """One more in ``slot``; None when the cache is down (a limit fails open, the API stays up)."""
    # The entry outlives its window a little, so a slow clock in one process cannot
    # see it vanish and restart the count.
    try:
        redis = _redis(slot)
        if redis is not None:
            client, key = redis
            pipe = client.pipeline(transaction=False)
            pipe.incr(key)
            pipe.expire(key, window + 5)
            return int(pipe.execute()[0])
        cache.add(slot, 0, timeout=window + 5)
        try:
            return int(cache.incr(slot))
        except ValueError:  # evicted between add and incr: this request opens it again
            cache.add(slot, 1, timeout=window + 5)
            return 1
    except Exception:
        logger.warning("ratelimit.cache_unavailable slot=%s", slot.rsplit(":", 2)[0], exc_info=True)
        return None


def ratelimit_hit(*, key_id: int, now: float | None = None) -> None:
    """Count one request of API key ``key_id``; RateLimitedError past the limit.

    ``KEELGATE_API_RATE_LIMIT = 0`` turns the limit off.
    """
    limit = int(getattr(settings, "KEELGATE_API_RATE_LIMIT", 600))
    window = _window()
    if limit <= 0 or window <= 0:
        return
    slot, retry_after = _slot(f"key:{key_id}", window, time.time() if now is None else now)
    count = _count(slot, window)
    if count is not None and count > limit:
        raise RateLimitedError(retry_after)


def _failure_limit() -> int:
    return int(getattr(settings, "KEELGATE_API_AUTH_FAILURE_LIMIT", 20))


def auth_failure_check(*, address: str, now: float | None = None) -> None:
    """AuthRateLimitedError if ``address`` already failed its limit in this window."""
    limit, window = _failure_limit(), _window()
    if limit <= 0 or window <= 0:
        return
    slot, retry_after = _slot(f"auth-fail:{address}", window, time.time() if now is None else now)
    try:
        redis = _redis(slot)
        failures = int((redis[0].get(redis[1]) if redis is not None else cache.get(slot)) or 0)
    except Exception:
        logger.warning("ratelimit.cache_unavailable slot=auth-fail", exc_info=True)
        return
    if failures >= limit:
        raise AuthRateLimitedError(retry_after)


def auth_failure_hit(*, address: str, now: float | None = None) -> None:
    """Count one failed API authentication from ``address`` (0 as the limit: not counted)."""
    limit, window = _failure_limit(), _window()
    if limit <= 0 or window <= 0:
        return
    slot, _ = _slot(f"auth-fail:{address}", window, time.time() if now is None else now)
    if _count(slot, window) == limit:
        logger.warning("api.auth_failures_limited address=%s", address)
