"""One audit event and the hash that links it to the one before.

The hash covers ``prev_hash`` and the canonical bytes of everything a reader could
care about (tenant, number, time, actor, kind, body), so editing any of them, or
moving the event, breaks the link.
"""

from __future__ import annotations

import hashlib
import json
import json.scanner
import re
from collections.abc import Callable, Mapping
from datetime import UTC, date, datetime
from functools import lru_cache
from typing import Annotated, Any, cast

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from keelgate.canonical import canonical_bytes, canonical_json

__all__ = [
    "GENESIS_HASH",
    "AuditEvent",
    "compute_hash",
    "encode_canonical",
    "format_at",
    "in_stored_form",
    "page_in_stored_form",
]

GENESIS_HASH = "0" * 64
"""The ``prev_hash`` of the first event of every chain."""

_HEX64 = r"^[0-9a-f]{64}$"


def _utc(value: datetime) -> datetime:
    # A naive time would hash differently on every machine's local zone: refuse it.
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("audit times must be timezone-aware")
    return value.astimezone(UTC)


UtcDatetime = Annotated[datetime, AfterValidator(_utc)]


def format_at(at: datetime) -> str:
    """The stored and hashed form of a time: ISO 8601, always with microseconds.

    A fixed ``timespec`` keeps the text identical after a round trip through a
    database (``isoformat()`` alone drops ``.000000``), so the hash stays stable.
    """
    return at.isoformat(timespec="microseconds")


def compute_hash(prev_hash: str, canonical: bytes) -> str:
    """``sha256(prev_hash || canonical)`` as lowercase hex: the link of one event."""
    return hashlib.sha256(prev_hash.encode("ascii") + canonical).hexdigest()


def normalize_body(body: Mapping[str, Any]) -> dict[str, Any]:
    """The body as it reads back from storage: a fresh JSON round trip of it.

    Raises TypeError or ValueError (NaN, a cycle) for a body that is not JSON, so
    nothing unserialisable is ever hashed. Tuples become lists and keys become
    strings here, once, so the hash matches what every store returns later.
    """
    if not isinstance(body, Mapping):
        raise TypeError(f"audit body must be a mapping, not {type(body).__name__}")
    loaded: dict[str, Any] = json.loads(canonical_json(dict(body)))
    return loaded


class AuditEvent(BaseModel):
    """One link of a tenant's chain, exactly as stored.

    Treat ``body`` as read-only: it is the stored value, not a copy.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    tenant_id: str
    seq: int = Field(ge=1)
    at: UtcDatetime
    actor: str
    kind: str
    body: dict[str, Any]
    prev_hash: str = Field(pattern=_HEX64)
    hash: str = Field(pattern=_HEX64)

    def canonical(self) -> bytes:
        """The bytes the hash covers (``prev_hash`` aside)."""
        return canonical_bytes(
            {
                "tenant_id": self.tenant_id,
                "seq": self.seq,
                "at": format_at(self.at),
                "actor": self.actor,
                "kind": self.kind,
                "body": self.body,
            }
        )

    @classmethod
    def build(
        cls,
        tenant_id: str,
        seq: int,
        at: datetime,
        actor: str,
        kind: str,
        body: Mapping[str, Any],
        prev_hash: str,
    ) -> AuditEvent:
        """A new event linked to ``prev_hash``, its body normalised and its hash computed."""
        draft = cls(
            tenant_id=tenant_id,
            seq=seq,
            at=at,
            actor=actor,
            kind=kind,
            body=normalize_body(body),
            prev_hash=prev_hash,
            hash=GENESIS_HASH,
        )
        return draft.model_copy(update={"hash": compute_hash(prev_hash, draft.canonical())})


def _refuse(value: object) -> object:
    raise TypeError(f"{type(value).__name__} is not JSON")


def _make_fast_encoder() -> Callable[[Any], str]:
    # json.dumps builds a new C encoder on every call, about a fifth of the cost of
    # verifying one event; build it once. The options mirror canonical_json exactly
    # (a test pins the two together). No cycle check: verified bodies come from
    # storage, where a cycle cannot exist.
    # json.encoder.c_make_encoder is undocumented (absent from typeshed): look it up
    # and fall back to the public encoder where it is missing.
    make: Callable[..., Callable[[Any, int], list[str]]] | None = getattr(
        json.encoder, "c_make_encoder", None
    )
    if make is None:  # pragma: no cover - CPython always has the C encoder
        return json.JSONEncoder(
            sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        ).encode
    # markers, default, encoder, indent, key_sep, item_sep, sort_keys, skipkeys, allow_nan
    encoder = make(None, _refuse, json.encoder.encode_basestring, None, ":", ",", True, False, False)
    join = "".join

    def encode(value: Any) -> str:
        return join(encoder(value, 0))

    return encode


_encode = _make_fast_encoder()


def fast_canonical(tenant_id: str, seq: int, at: datetime, actor: str, kind: str, body: Any) -> bytes:
    """Same bytes as :meth:`AuditEvent.canonical`, without building a model."""
    return _encode(
        {
            "tenant_id": tenant_id,
            "seq": seq,
            "at": format_at(at),
            "actor": actor,
            "kind": kind,
            "body": body,
        }
    ).encode("utf-8")


encode_canonical: Callable[[Any], str] = _encode
""":func:`~keelgate.canonical.canonical_json` built once (see :func:`fast_canonical`)."""


def linked_text(
    prev_hash: str, tenant_json: str, seq: int, at_text: str, actor_json: str, kind_json: str, body_text: str
) -> bytes:
    """``prev_hash`` and the canonical event, put together from stored-form parts.

    The keys of :func:`fast_canonical` in sorted order, so the bytes are the same; the
    strings arrive already JSON-encoded, the time as :func:`format_at` writes it (it
    needs no escaping) and the body as the canonical JSON a store keeps.
    """
    return (
        f'{prev_hash}{{"actor":{actor_json},"at":"{at_text}","body":{body_text},'
        f'"kind":{kind_json},"seq":{seq},"tenant_id":{tenant_json}}}'
    ).encode()


def linked_parts(tenant_id: str, at_text: str, actor: str, kind: str, body_text: str) -> tuple[str, str]:
    """What :func:`linked_text` puts around the event's ``seq``, for a store that hashes elsewhere.

    ``prev_hash + before + str(seq) + after`` are the very bytes (UTF-8) the event's hash
    is taken over, so a database that knows the head can link the event itself.
    ``at_text`` is the time as :func:`format_at` writes it, in UTC.
    """
    before = f'{{"actor":{_encode(actor)},"at":"{at_text}","body":{body_text},"kind":{_encode(kind)},"seq":'
    return before, f',"tenant_id":{_encode(tenant_id)}}}'  # linked_text's layout; a test holds them equal


def encode_body(body: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """A body's stored text and the value that reads back from it, encoding it once.

    Raises TypeError or ValueError for a body that is not JSON (see :func:`normalize_body`).
    """
    if not isinstance(body, Mapping):
        raise TypeError(f"audit body must be a mapping, not {type(body).__name__}")
    text = canonical_json(dict(body))
    loaded: dict[str, Any] = json.loads(text)
    return text, loaded


def stored_event(
    tenant_id: str,
    seq: int,
    at: datetime,
    actor: str,
    kind: str,
    body: tuple[str, dict[str, Any]],
    prev_hash: str,
) -> AuditEvent:
    """:meth:`AuditEvent.build` for a store's append, given :func:`encode_body`'s result.

    The store made every field itself (its head, its clock), so the model is not
    validated again, and the canonical bytes are assembled from the body text instead
    of encoding the body a second and third time. Same event, same hash.
    """
    if seq < 1:
        raise ValueError("audit seq starts at 1")
    at = _utc(at)
    body_text, value = body
    linked = linked_text(
        prev_hash, _encode(tenant_id), seq, format_at(at), _encode(actor), _encode(kind), body_text
    )
    return AuditEvent.model_construct(
        tenant_id=tenant_id,
        seq=seq,
        at=at,
        actor=actor,
        kind=kind,
        body=value,
        prev_hash=prev_hash,
        hash=hashlib.sha256(linked).hexdigest(),
    )


def _make_scanner() -> Callable[[str, int], tuple[Any, int]]:
    # The decoder's own scanner, called directly: json.loads adds two regex passes
    # for surrounding whitespace, which canonical text never has, and costs about
    # twice as much on a short body. typeshed types the context argument too narrowly.
    return json.scanner.make_scanner(cast(Any, json.JSONDecoder()))


_scan = _make_scanner()


def in_stored_form(at_text: object, body_text: object) -> bool:
    """Whether a row's time and body text are exactly what a store writes for them.

    Verifying from stored text hashes that text as it is, so the same time or body
    written any other way (no microseconds, ``Z``, spaces, unsorted keys, NaN) is not
    what was hashed and must count as broken, not be normalised into a match.
    """
    if not isinstance(at_text, str) or not isinstance(body_text, str):
        return False
    try:
        at = datetime.fromisoformat(at_text)
        body, end = _scan(body_text, 0)
        return (
            at.tzinfo is not None
            and end == len(body_text)
            and format_at(at) == at_text
            and _encode(body) == body_text
        )
    except (ValueError, StopIteration, RecursionError):
        return False


_UTC_LINES = re.compile(
    r"(?:[0-9]{4}-[0-9]{2}-[0-9]{2}T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]\.[0-9]{6}\+00:00\n)*"
)
"""Times as :func:`format_at` writes a UTC time, one per line. With a real date, such a
line is its own ``format_at(fromisoformat(line))``."""

_UTC_LINE_LENGTH = len("2026-01-01T00:00:00.000000+00:00\n")


@lru_cache(maxsize=4096)
def _real_date(text: str) -> bool:
    try:
        date.fromisoformat(text)
    except ValueError:
        return False
    return True


def page_in_stored_form(at_texts: list[Any], body_texts: list[Any]) -> bool:
    """True only if :func:`in_stored_form` holds for every pair; False means check each.

    Parsing and formatting each time costs more than hashing its row; one regex over
    the joined times covers what ``append`` writes (UTC) for a whole page. Bodies are
    parsed in one call too, but each value must still re-encode to exactly its own
    row's text, so joining cannot pass off two broken bodies as two good ones.
    """
    try:
        times = "\n".join(at_texts) + "\n"
        values, _ = _scan("[" + ",".join(body_texts) + "]", 0)
        if (
            len(times) != _UTC_LINE_LENGTH * len(at_texts)
            or _UTC_LINES.fullmatch(times) is None
            or not all(map(_real_date, {text[:10] for text in at_texts}))
            or len(values) != len(body_texts)
        ):
            return False
        return list(map(_encode, values)) == body_texts
    except (TypeError, ValueError, StopIteration, RecursionError):
        # Not text, not JSON, NaN, or nested one level too deep once joined: row by row.
        return False
