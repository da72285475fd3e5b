"""Walking a chain to find the first broken link.

Verification recomputes every hash from the event's fields with a prebuilt encoder
instead of validating models, because it runs over whole histories (millions of
events) and its cost is almost all hashing and encoding.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from keelgate.audit._event import GENESIS_HASH, AuditEvent, fast_canonical
from keelgate.errors import ChainBrokenError

if TYPE_CHECKING:
    from keelgate.audit._protocol import AuditLog

__all__ = ["ChainReport", "verify", "verify_chain"]


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


def verify(log: AuditLog, tenant_id: str, *, expect_head: tuple[int, str] | None = None) -> ChainReport:
    """:func:`verify_chain` over the whole of ``tenant_id``'s chain in ``log``."""
    return verify_chain(log.events(tenant_id), tenant_id=tenant_id, expect_head=expect_head)
