"""API keys for tests whose audit chain must start empty.

``api_key_create`` writes ``api_key.created`` into the tenant's chain, as it should; a test
about something else (a filter over a log written with made-up numbers, an empty chain's
head) needs a working key without that event, so it writes the row as the service would.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

from tenants.models import ApiKey, Tenant


def key_row(*, tenant: Tenant, user: Any, name: str = "") -> str:
    """A working key of ``user`` in ``tenant``, ``kg_<prefix>_<secret>``, with no audit event."""
    secret = secrets.token_urlsafe(32)
    prefix = secrets.token_hex(6)
    ApiKey.objects.create(
        tenant=tenant, user=user, name=name, prefix=prefix, hashed=hashlib.sha256(secret.encode()).hexdigest()
    )
    return f"kg_{prefix}_{secret}"
