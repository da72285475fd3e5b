"""Standard Webhooks signatures: ``whsec_`` secrets and the three headers a receiver checks.

Written with the standard library's ``hmac`` rather than the ``standardwebhooks``
package, so that the tests, which verify every delivery with that package, are an
independent check of this code and not the same code run twice.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Sequence

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32
"""The specification asks for 24 to 64 random bytes."""


def new_secret() -> str:
    """A fresh signing secret: ``whsec_`` and 32 random bytes in base64."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode("ascii")


def signature(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """``v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`` under the decoded secret."""
    key = base64.b64decode(secret.removeprefix(SECRET_PREFIX))
    signed = f"{msg_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode("ascii")


def signed_headers(keys: Sequence[str], msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The headers of one attempt: the id stays the same across retries, the timestamp is now.

    One signature per secret in ``keys``, space-separated, as the specification allows
    while a secret is rotated: a receiver holding either one verifies the message.
    """
    return {
        "content-type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": " ".join(signature(key, msg_id, timestamp, body) for key in keys),
    }
