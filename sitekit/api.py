"""The REST API's shared shapes: error bodies, response tables, input patterns.

Authentication (who is calling, in which tenant) is identity and lives with it, in
:mod:`tenants.api_auth`; the NinjaAPI itself is assembled in ``keelgate_site.api``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any

import pydantic_core
from django.http import HttpRequest
from ninja.renderers import JSONRenderer
from ninja.responses import NinjaJSONEncoder
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict

__all__ = [
    "ACTION_ID",
    "BASE64",
    "CURSOR",
    "INPUT",
    "JSON_INTEGER",
    "MAX_ID",
    "NO_NUL",
    "PATTERN_WORDS",
    "READ_ERRORS",
    "RUN_ID",
    "SAYS_SOMETHING",
    "SHA256_HEX",
    "SLUG",
    "WRITE_ERRORS",
    "ErrorOut",
    "JsonObject",
    "PydanticJSONRenderer",
    "json_value",
    "responses",
    "validation_words",
]

NO_NUL = r"^[^\x00]*$"
"""Free text may hold anything but NUL, which PostgreSQL cannot store in a text column."""
SAYS_SOMETHING = r"^[^\x00]*[^\x00\s][^\x00]*$"
"""Free text that must say something: not blank, no NUL (a note, a reason)."""
SLUG = r"^[a-z0-9][a-z0-9_-]{0,62}$"
"""The shape of a tenant slug."""
MAX_ID = 2**63 - 1
"""The largest database id: a bigger number is a validation error, not a database one."""
CURSOR = r"^[A-Za-z0-9_-]{1,200}$"
"""The shape of a cursor this API hands out (:mod:`sitekit.paging`)."""
RUN_ID = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"
"""A run's id: what a URL path and a log line carry safely."""
ACTION_ID = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$"
"""An action's id within its run."""
SHA256_HEX = r"^[0-9a-f]{64}$"
"""A SHA-256 in lowercase hex (an ``arguments_hash``, a chain hash)."""
BASE64 = r"^[A-Za-z0-9+/=]+$"
"""Standard base64 text (a key, a signature)."""

PATTERN_WORDS = {
    NO_NUL: "must not contain NUL characters",
    SAYS_SOMETHING: "must not be blank, and must not contain NUL characters",
    SLUG: "must be a slug: lowercase letters, digits, - and _, starting with a letter or digit (max 63)",
    CURSOR: "must be a cursor this API handed out (next_cursor)",
    RUN_ID: "must be letters, digits and . _ : -, starting with a letter or digit (max 128)",
    ACTION_ID: "must be letters, digits and . _ : -, starting with a letter or digit (max 64)",
    SHA256_HEX: "must be a SHA-256 in lowercase hex (64 characters)",
    BASE64: "must be base64 text",
}
"""What a 422 says of a value that does not match its pattern: words, never the regular
expression (a schema's pattern not listed here is said as "is not in the accepted form")."""


def validation_words(error: Mapping[str, Any]) -> str:
    """What is wrong with one value, in words: pydantic's message, except a pattern's,
    said with :data:`PATTERN_WORDS` (the API and the console's forms say the same)."""
    if error.get("type") == "string_pattern_mismatch":
        pattern = (error.get("ctx") or {}).get("pattern", "")
        return PATTERN_WORDS.get(pattern, "is not in the accepted form")
    return str(error.get("msg", "not valid")).removeprefix("Value error, ")


INPUT = ConfigDict(extra="forbid", strict=True)
"""Every API input schema: unknown fields are errors, and nothing is coerced. Lax parsing
would read ``{"executed": "yes"}`` as a settlement and ``{"max_iterations": true}`` as 1."""


def _json_integer(value: Any) -> Any:
    """JSON Schema's integer: a number with no fraction (``5`` or ``5.0``), never ``"5"`` or ``true``."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value  # anything else meets the strict int check as it is (and fails it unless an int)


JSON_INTEGER = BeforeValidator(_json_integer)
"""For an ``int`` field of an input schema, after its ``Field`` bounds (which must come first
for the bounds to reach the JSON schema): ``Annotated[int, Field(ge=1), JSON_INTEGER]``.
5.0 is then 5, as JSON Schema (and schemathesis) read it; "5" and true stay refused."""

MAX_JSON_OBJECT_BYTES = 16_384


def _bounded_object(value: dict[str, Any]) -> dict[str, Any]:
    if len(json.dumps(value, separators=(",", ":"), allow_nan=False)) > MAX_JSON_OBJECT_BYTES:
        raise ValueError(f"must be at most {MAX_JSON_OBJECT_BYTES} bytes as JSON")
    return value


JsonObject = Annotated[dict[str, Any], AfterValidator(_bounded_object)]
"""A JSON object of at most 16 KiB (a downstream record, edited arguments)."""


def json_value(text: str | None) -> Any:
    """Stored JSON text as the value it holds, for an output schema (None stays None).

    Untrusted values (tool arguments and outputs) leave the API as JSON values, not as
    JSON strings inside JSON; text that is somehow not JSON is returned as the string.
    """
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


class ErrorOut(BaseModel):
    """Every error: a stable ``code`` programs compare, and fixed wording people read."""

    code: str
    detail: str


READ_ERRORS = (401, 404, 422, 429)
WRITE_ERRORS = (400, 401, 403, 404, 409, 413, 422, 429)


def responses(ok: dict[int, Any], errors: tuple[int, ...]) -> dict[int, Any]:
    """An operation's response schemas: its success bodies and ErrorOut for each error status."""
    return {**ok, **dict.fromkeys(errors, ErrorOut)}


# -- rendering ---------------------------------------------------------------------------


class PydanticJSONRenderer(JSONRenderer):
    """Response bodies encoded by pydantic-core (Rust), not by ``json.dumps`` in Python.

    ``json.dumps`` and ninja's encoder make a Python call per timestamp and enum, the
    larger part of a page's encoding (docs/performance.md#json-rendering). Timestamps keep their
    microseconds (RFC 3339, ``Z`` for UTC); text is UTF-8, not ``\\u`` escapes. What
    pydantic-core cannot encode goes to ninja's own encoder, as before.
    """

    _fallback = NinjaJSONEncoder().default

    def render(self, request: HttpRequest, data: Any, *, response_status: int) -> Any:
        return pydantic_core.to_json(data, fallback=self._fallback)
