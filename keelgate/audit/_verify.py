"""Walking a chain to find the first broken link.

Verification recomputes every hash from the event's fields with a prebuilt encoder
instead of validating models, because it runs over whole histories (millions of
events) and its cost is almost all hashing and encoding. A store that keeps the
canonical text itself is verified from that text (:func:`verify_rows`): rebuilding
events from it would cost more than the hashing (docs/performance.md#audit-verify).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from keelgate.audit._event import (
    GENESIS_HASH,
    AuditEvent,
    encode_canonical,
    fast_canonical,
    in_stored_form,
    linked_text,
    page_in_stored_form,
)
from keelgate.errors import ChainBrokenError

if TYPE_CHECKING:
    from keelgate.audit._protocol import AuditLog

__all__ = ["ChainReport", "StoredRow", "verify", "verify_chain", "verify_rows"]

StoredRow = tuple[Any, Any, Any, Any, Any, Any, Any, Any]
"""``(tenant_id, seq, at, actor, kind, body, prev_hash, hash)`` as SQL returns them:
``at`` as :func:`~keelgate.audit._event.format_at` text, ``body`` as canonical JSON."""

_PAGE = 1_000
"""Rows checked together: the stored-form check runs once per page, not once per row."""

_SEQ, _AT, _BODY = itemgetter(1), itemgetter(2), itemgetter(5)

_STRINGS_KEPT = 4_096
"""Encoded actors, kinds and tenants remembered while verifying: few, and repeated."""


@dataclass(frozen=True)
class ChainReport:
    """What :func:`verify_chain` found.

    ``head_seq`` and ``head_hash`` name the last event that verified (``0`` and
    :data:`GENESIS_HASH` when none did), so a good report's head is the digest to
    export. ``first_bad_seq`` is the sequence number at which the chain first fails:
    for a deleted event, the missing number. ``reason`` is one of ``hash_mismatch``
    (an event's fields do not give its hash), ``prev_hash_mismatch`` (the link to the
    previous event is wrong), ``sequence_gap`` (a number is missing, repeated or out of
    order), ``wrong_tenant`` and ``digest_mismatch`` (the expected head is absent or
    differs: history up to an exported digest was rewritten or truncated).
    """

    ok: bool
    checked: int
    head_seq: int
    head_hash: str
    first_bad_seq: int | None
    reason: str | None


def verify_chain(
    events: Iterable[AuditEvent],
    *,
    tenant_id: str | None = None,
    expect_head: tuple[int, str] | None = None,
) -> ChainReport:
    """Check ``events`` (oldest first) link by link and report the first break.

    Numbers must run 1, 2, 3, ... and each event must link to the previous hash and
    hash to its own ``hash``. Every event must belong to ``tenant_id`` (by default,
    the first event's tenant). A chain rewritten consistently from some point on still
    links up; only ``expect_head=(seq, hash)``, a digest exported earlier, catches
    that (and truncation): the chain must hold an event ``seq`` with that ``hash``.
    A store that raises :class:`ChainBrokenError` for an unreadable row is reported
    as a ``hash_mismatch`` at the next expected number.
    """
    want_seq, want_hash = expect_head if expect_head is not None else (-1, "")
    digest_seen = expect_head is None or (want_seq == 0 and want_hash == GENESIS_HASH)
    sha256 = hashlib.sha256
    prev_hash = GENESIS_HASH
    prev_bytes = GENESIS_HASH.encode("ascii")
    expected = 1
    tenant = tenant_id
    iterator = iter(events)
    while True:
        try:
            event = next(iterator)
        except StopIteration:
            break
        except ChainBrokenError:
            return _broken("hash_mismatch", expected, expected, prev_hash)
        if tenant is None:
            tenant = event.tenant_id
        elif event.tenant_id != tenant:
            return _broken("wrong_tenant", expected, expected, prev_hash)
        if event.seq != expected:
            return _broken("sequence_gap", expected, expected, prev_hash)
        if event.prev_hash != prev_hash:
            return _broken("prev_hash_mismatch", expected, expected, prev_hash)
        digest = sha256(prev_bytes)
        try:
            digest.update(
                fast_canonical(event.tenant_id, event.seq, event.at, event.actor, event.kind, event.body)
            )
        except (TypeError, ValueError, AttributeError):
            # Fields a store could never have hashed (NaN, a non-time): not this hash.
            return _broken("hash_mismatch", expected, expected, prev_hash)
        if digest.hexdigest() != event.hash:
            return _broken("hash_mismatch", expected, expected, prev_hash)
        if expected == want_seq:
            if event.hash != want_hash:
                return _broken("digest_mismatch", expected, expected, prev_hash)
            digest_seen = True
        prev_hash = event.hash
        prev_bytes = prev_hash.encode("ascii")
        expected += 1
    if not digest_seen:
        return _broken("digest_mismatch", want_seq, expected, prev_hash)
    return ChainReport(True, expected - 1, expected - 1, prev_hash, None, None)


def _broken(reason: str, bad_seq: int, expected: int, head_hash: str) -> ChainReport:
    return ChainReport(False, expected - 1, expected - 1, head_hash, bad_seq, reason)


def verify_rows(
    rows: Iterable[StoredRow],
    *,
    tenant_id: str | None = None,
    expect_head: tuple[int, str] | None = None,
) -> ChainReport:
    """:func:`verify_chain` over stored rows, hashing their text as it is stored.

    The stored body is already canonical JSON and the stored time already the hashed
    text, so the canonical bytes are put together from the columns instead of parsing
    and re-encoding every event. The report is the one ``verify_chain`` gives over the
    same rows read as events (``SqliteAuditLog.events``), with one deliberate
    difference: a time or body not stored exactly as ``append`` writes it (``Z``, no
    microseconds, spaces, reordered keys) is a ``hash_mismatch``, reported where an
    unreadable row would be, even when it reads back as the hashed value: it is not
    the text that was hashed.
    """
    want_seq, want_hash = expect_head if expect_head is not None else (-1, "")
    digest_seen = expect_head is None or (want_seq == 0 and want_hash == GENESIS_HASH)
    sha256 = hashlib.sha256
    prev_hash = GENESIS_HASH
    expected = 1
    tenant = tenant_id
    strings: dict[str, str] = {}
    iterator = iter(rows)
    while True:
        page, unreadable = _next_page(iterator)
        good = _stored_prefix(page)
        for row_tenant, seq, at, actor, kind, body, row_prev, row_hash in islice(page, good):
            if tenant is None:
                tenant = row_tenant
            elif row_tenant != tenant:
                return _broken("wrong_tenant", expected, expected, prev_hash)
            if seq != expected:
                return _broken("sequence_gap", expected, expected, prev_hash)
            if row_prev != prev_hash:
                return _broken("prev_hash_mismatch", expected, expected, prev_hash)
            try:
                actor_json = strings.get(actor) or _json_string(strings, actor)
                kind_json = strings.get(kind) or _json_string(strings, kind)
                tenant_json = strings.get(row_tenant) or _json_string(strings, row_tenant)
                linked = linked_text(prev_hash, tenant_json, seq, at, actor_json, kind_json, body)
            except (TypeError, ValueError):
                # Fields a store could never have hashed (bytes, lone surrogates).
                return _broken("hash_mismatch", expected, expected, prev_hash)
            if sha256(linked).hexdigest() != row_hash:
                return _broken("hash_mismatch", expected, expected, prev_hash)
            if expected == want_seq:
                if row_hash != want_hash:
                    return _broken("digest_mismatch", expected, expected, prev_hash)
                digest_seen = True
            prev_hash = row_hash
            expected += 1
        if good < len(page) or unreadable:
            return _broken("hash_mismatch", expected, expected, prev_hash)
        if len(page) < _PAGE:
            break
    if not digest_seen:
        return _broken("digest_mismatch", want_seq, expected, prev_hash)
    return ChainReport(True, expected - 1, expected - 1, prev_hash, None, None)


def _next_page(iterator: Iterator[StoredRow]) -> tuple[list[StoredRow], bool]:
    """Up to a page of rows, and whether the source then raised :class:`ChainBrokenError`."""
    page: list[StoredRow] = []
    append = page.append
    try:
        for row in islice(iterator, _PAGE):
            append(row)
    except ChainBrokenError:
        return page, True
    return page, False


def _stored_prefix(page: list[StoredRow]) -> int:
    """How many leading rows of ``page`` read as events would: what ``_event_from_row`` checks.

    An integer seq, and a time and body in stored form; the first row failing that is
    where :func:`verify_chain` would have met an unreadable row.
    """
    if not page:
        return 0
    seqs_are_ints = set(map(type, map(_SEQ, page))) == {int}
    if seqs_are_ints and page_in_stored_form(list(map(_AT, page)), list(map(_BODY, page))):
        return len(page)
    for index, row in enumerate(page):
        if type(row[1]) is not int or not in_stored_form(row[2], row[5]):
            return index
    return len(page)


def _json_string(strings: dict[str, str], value: object) -> str:
    """``value`` as the canonical encoder writes it; strings are remembered for the next rows."""
    text = encode_canonical(value)
    if type(value) is str and len(strings) < _STRINGS_KEPT:
        strings[value] = text
    return text


def verify(log: AuditLog, tenant_id: str, *, expect_head: tuple[int, str] | None = None) -> ChainReport:
    """:func:`verify_chain` over the whole of ``tenant_id``'s chain in ``log``.

    A log that hands out its rows as stored (``rows(tenant_id)``, as
    :class:`~keelgate.audit.SqliteAuditLog` does) is verified from them by
    :func:`verify_rows`, without rebuilding an event per row.
    """
    rows = getattr(log, "rows", None)
    if callable(rows):
        return verify_rows(rows(tenant_id), tenant_id=tenant_id, expect_head=expect_head)
    return verify_chain(log.events(tenant_id), tenant_id=tenant_id, expect_head=expect_head)
