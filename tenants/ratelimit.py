"""A rate limit per API key: a fixed window counted in the Django cache.

Each key may make ``KEELGATE_API_RATE_LIMIT`` requests per ``KEELGATE_API_RATE_WINDOW``
seconds. A fixed window, not a token bucket, because ``cache.add`` plus ``cache.incr``
is atomic in every Django cache backend (LocMem, Redis, Memcached), so concurrent
requests in any number of processes sharing the cache can never both take the last
slot; a token bucket would need a read-modify-write under a lock. The price is that a
client can spend up to twice the limit across a window boundary, which is acceptable
for a fairness limit (it is not a security boundary).
"""

from __future__ import annotations

import logging
import math
import time

from django.conf import settings
from django.core.cache import cache

from sitekit.errors import RateLimitedError

__all__ = ["ratelimit_hit"]

logger = logging.getLogger("keelgate.api")


def ratelimit_hit(*, key_id: int, now: float | None = None) -> None:
    """Count one request of API key ``key_id``; RateLimitedError past the limit.

    ``KEELGATE_API_RATE_LIMIT = 0`` turns the limit off.
    """
    limit = int(getattr(settings, "KEELGATE_API_RATE_LIMIT", 600))
    window = int(getattr(settings, "KEELGATE_API_RATE_WINDOW", 60))
    if limit <= 0 or window <= 0:
        return
    now = time.time() if now is None else now
    index = int(now // window)
    slot = f"keelgate:ratelimit:{key_id}:{window}:{index}"
    # The entry outlives its window a little, so a slow clock in one process cannot
    # see it vanish and restart the count.
    try:
        cache.add(slot, 0, timeout=window + 5)
        try:
            count = cache.incr(slot)
        except ValueError:  # evicted between add and incr: this request opens it again
            cache.add(slot, 1, timeout=window + 5)
            count = 1
    except Exception:  # the cache is down: a fairness limit fails open, the API stays up
        logger.warning("ratelimit.cache_unavailable key_id=%s", key_id, exc_info=True)
        return
    if count > limit:
        raise RateLimitedError(max(1, math.ceil((index + 1) * window - now)))
