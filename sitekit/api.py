"""The REST API's shared shapes: error bodies, response tables, input patterns, cursors.

Authentication (who is calling, in which tenant) is identity and lives with it, in
:mod:`tenants.api_auth`; the NinjaAPI itself is assembled in ``keelgate_site.api``.
"""

from __future__ import annotations

import base64
import binascii
import json
from datetime import datetime
from typing import Annotated, Any

import pydantic_core
from django.db.models import Model, Q, QuerySet
from django.http import HttpRequest
from ninja.renderers import JSONRenderer
from ninja.responses import NinjaJSONEncoder
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict

from sitekit.db import keyset_values
from sitekit.errors import InvalidCursorError

__all__ = [
    "CURSOR",
    "INPUT",
    "JSON_INTEGER",
    "MAX_ID",
    "NO_NUL",
    "READ_ERRORS",
    "SLUG",
    "WRITE_ERRORS",
    "ErrorOut",
    "JsonObject",
    "PydanticJSONRenderer",
    "json_value",
    "keyset_page",
    "responses",
]

NO_NUL = r"^[^\x00]*$"
"""Free text may hold anything but NUL, which PostgreSQL cannot store in a text column."""
SLUG = r"^[a-z0-9][a-z0-9_-]{0,62}$"
"""The shape of a tenant slug."""
MAX_ID = 2**63 - 1
"""The largest database id: a bigger number is a validation error, not a database one."""
CURSOR = r"^[A-Za-z0-9_-]{1,200}$"
"""The shape of a cursor this API hands out."""


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


# -- keyset pagination -------------------------------------------------------------------


def _cursor_encode(at: datetime, pk: int) -> str:
    raw = json.dumps([at.isoformat(), pk], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _cursor_decode(cursor: str) -> tuple[datetime, int]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        at_text, pk = json.loads(raw)
        at = datetime.fromisoformat(at_text)
    except (binascii.Error, ValueError, TypeError) as exc:  # JSONDecodeError is a ValueError
        raise InvalidCursorError() from exc
    if at.tzinfo is None or not isinstance(pk, int) or isinstance(pk, bool) or not 0 < pk <= MAX_ID:
        raise InvalidCursorError()
    return at, pk


def keyset_page(
    rows: QuerySet[Any], *, field: str, cursor: str | None, limit: int
) -> tuple[list[Any], str | None]:
    """One page of ``rows`` (ordered by ``-field, -id``; models, or ``values()`` dicts with
    ``field`` and ``id``) after ``cursor``, and the next cursor.

    Keyset, not offset, pagination: a page is stable while new rows arrive at the top,
    and reading page 1000 costs what reading page 1 does.
    """
    if cursor:
        at, pk = _cursor_decode(cursor)
        # The first condition is implied by the second; it is there for the index, where a
        # page deep in the list then starts at its cursor instead of walking every newer row.
        rows = rows.filter(
            Q(**{f"{field}__lte": at}), Q(**{f"{field}__lt": at}) | Q(**{field: at, "id__lt": pk})
        )
    return _page_and_cursor(list(rows[: limit + 1]), field, limit)


def keyset_values_page(
    model: type[Model],
    columns: tuple[str, ...],
    filters: dict[str, Any],
    *,
    field: str,
    cursor: str | None,
    limit: int,
) -> tuple[list[dict[str, Any]], str | None]:
    """:func:`keyset_page` of ``model.objects.filter(**filters).values(*columns)``, from a
    statement written once per shape (:func:`sitekit.db.keyset_values`): for the hot lists."""
    after = _cursor_decode(cursor) if cursor else None
    rows = keyset_values(model, columns, filters, field=field, after=after, limit=limit + 1)
    return _page_and_cursor(rows, field, limit)


def _page_and_cursor(page: list[Any], field: str, limit: int) -> tuple[list[Any], str | None]:
    """The first ``limit`` of ``limit + 1`` rows read, and the cursor after them if there are more."""
    if len(page) <= limit:
        return page, None
    last = page[limit - 1]
    if isinstance(last, dict):  # a values() page
        return page[:limit], _cursor_encode(last[field], last["id"])
    return page[:limit], _cursor_encode(getattr(last, field), last.pk)
