"""Witnesses: each new checkpoint goes to the witnesses the operator names, and their cosignatures are kept.

A witness (C2SP ``tlog-witness``) checks that a checkpoint extends the last one it
cosigned for the log and signs it (C2SP ``tlog-cosignature``, ``cosignature/v1``): with
cosignatures from witnesses a client trusts, a client knows the log did not show it a
history it showed no one else. ``KEELGATE_AUDIT_WITNESSES`` names them; none by default.

Delivery is durable and apart from every request: ``keelgate_sequencer`` runs
:func:`serve` in a thread beside its passes. Each pass finds, per witness, the tenants
whose newest checkpoint it has not cosigned, claims the tenant's :class:`WitnessState`
under a lease, and POSTs ``add-checkpoint``: ``old <size>``, the consistency proof from
that size, a blank line, the signed note. The answers (C2SP's):

- 200, signature lines: each cosignature by the witness's key is checked before it is
  stored (a bad one is refused and logged, never stored; lines by other keys are ignored);
- 409 ``text/x.tlog.size``: the witness last cosigned another size; asked again at once
  from that size, with a new proof (twice at most in one attempt);
- anything else (404 origin unknown, 403 signature, 422 proof, a refused connection, a
  timeout): recorded on the state and retried after a backoff that grows to ten minutes.

Nothing waits on a witness: appends, decisions and signing never read this state.
"""

from __future__ import annotations

import base64
import http.client
import logging
import re
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connection, transaction
from django.db.models import Exists, OuterRef, Q, Subquery
from django.utils import timezone

from audit.models import ChainHead, Checkpoint, WitnessCosignature, WitnessState
from audit.tree import node_reader
from keelgate.audit import (
    Cosignature,
    CosignerKey,
    NoteError,
    consistency_proof,
    verify_cosignatures,
)

__all__ = [
    "BACKOFF",
    "POLL_SECONDS",
    "PassResult",
    "Witness",
    "add_checkpoint_body",
    "configured_witnesses",
    "deliver",
    "due_tenants",
    "serve",
    "witness_pass",
]

log = logging.getLogger("keelgate.audit.witnesses")

BACKOFF = (5.0, 30.0, 120.0, 600.0)
"""Seconds before the next attempt after the 1st, 2nd, 3rd and every later failure in a row:
a witness that is down is asked again every ten minutes, for as long as it takes."""
POLL_SECONDS = 1.0
"""The rest between two passes: how long a new checkpoint may wait before it is sent."""
RESYNCS = 2
"""409 answers followed in one attempt: the witness's size is taken and the request made again."""
MAX_ANSWER = 64 * 1024
"""A witness's answer is read this far and no further."""
SIZE_TYPE = "text/x.tlog.size"
_SIZE = re.compile(r"(0|[1-9][0-9]{0,18})\n")
USER_AGENT = "Keelgate-Witness-Client/1"


@dataclass(frozen=True)
class Witness:
    """A witness the operator named: its submission prefix and its cosignature key."""

    url: str
    key: CosignerKey

    @property
    def endpoint(self) -> str:
        """Where ``add-checkpoint`` is POSTed."""
        return self.url.rstrip("/") + "/add-checkpoint"


def configured_witnesses() -> list[Witness]:
    """The witnesses of ``KEELGATE_AUDIT_WITNESSES``; ImproperlyConfigured naming a bad entry."""
    found: list[Witness] = []
    for entry in settings.KEELGATE_AUDIT_WITNESSES:
        parts = str(entry).split()
        if (
            len(parts) != 2
            or urlsplit(parts[0]).scheme not in ("http", "https")
            or not urlsplit(parts[0]).hostname
        ):
            raise ImproperlyConfigured(
                f"KEELGATE_AUDIT_WITNESSES: {entry!r} is not '<http(s) URL> <witness vkey>'"
            )
        try:
            key = CosignerKey.parse(parts[1])
        except NoteError as exc:
            raise ImproperlyConfigured(f"KEELGATE_AUDIT_WITNESSES: {parts[1]!r}: {exc}") from exc
        found.append(Witness(parts[0], key))
    return found


def add_checkpoint_body(old: int, proof: list[bytes], note: str) -> bytes:
    """The ``add-checkpoint`` request body: ``old <size>``, a base64 proof line per hash, a
    blank line, the signed checkpoint."""
    lines = [f"old {old}", *(base64.b64encode(h).decode("ascii") for h in proof)]
    return ("".join(f"{line}\n" for line in lines) + "\n" + note).encode()


@dataclass
class PassResult:
    """What one pass did: checkpoints cosigned, attempts that failed."""

    cosigned: int = 0
    failed: int = 0


def due_tenants(witness: Witness, now: datetime) -> list[str]:
    """Tenants whose newest checkpoint ``witness`` has not cosigned, not waiting out a backoff
    or claimed by another sender."""
    ours = {"witness": witness.key.name, "key_id": witness.key.key_id.hex()}
    latest = Checkpoint.objects.filter(tenant_id=OuterRef("tenant_id")).order_by("-size").values("size")[:1]
    cosigned = WitnessCosignature.objects.filter(
        checkpoint__tenant_id=OuterRef("tenant_id"), checkpoint__size=OuterRef("latest"), **ours
    )
    waiting = WitnessState.objects.filter(tenant_id=OuterRef("tenant_id"), **ours).filter(
        Q(due_at__gt=now) | Q(claimed_until__gt=now)
    )
    heads = (
        ChainHead.objects.annotate(latest=Subquery(latest))
        .filter(latest__isnull=False)
        .annotate(cosigned=Exists(cosigned), waiting=Exists(waiting))
        .filter(cosigned=False, waiting=False)
    )
    return sorted(heads.values_list("tenant_id", flat=True))


def witness_pass(*, witnesses: list[Witness] | None = None, now: datetime | None = None) -> PassResult:
    """Send every due tenant's newest checkpoint to every witness, once."""
    result = PassResult()
    for witness in configured_witnesses() if witnesses is None else witnesses:
        for tenant_id in due_tenants(witness, now or timezone.now()):
            done = deliver(witness, tenant_id, now=now)
            if done is True:
                result.cosigned += 1
            elif done is False:
                result.failed += 1
    return result


def _lease() -> timedelta:
    # A request's connect and reads each get the timeout; three of them, and room to record.
    return timedelta(seconds=3 * float(settings.KEELGATE_AUDIT_WITNESS_TIMEOUT_SECONDS) + 10)


def _claim(witness: Witness, tenant_id: str, now: datetime) -> WitnessState | None:
    state, _ = WitnessState.objects.get_or_create(
        tenant_id=tenant_id, witness=witness.key.name, key_id=witness.key.key_id.hex()
    )
    claimed = (
        WitnessState.objects.filter(pk=state.pk)
        .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lte=now))
        .filter(Q(due_at__isnull=True) | Q(due_at__lte=now))
        .update(claimed_until=now + _lease())
    )
    if not claimed:
        return None
    state.refresh_from_db()
    return state


@dataclass(frozen=True)
class _Cosigned:
    cosignatures: list[Cosignature]


@dataclass(frozen=True)
class _Resync:
    size: int


@dataclass(frozen=True)
class _Failed:
    status: int | None
    error: str
    alarm: bool = False
    """The witness and the log disagree about the tree: someone must look."""


@dataclass(frozen=True)
class _Answer:
    status: int | None
    content_type: str = ""
    body: bytes = b""
    error: str = ""


@dataclass
class _Attempt:
    old: int
    outcome: _Cosigned | _Failed | None = None
    resyncs: list[int] = field(default_factory=list)


def deliver(witness: Witness, tenant_id: str, *, now: datetime | None = None) -> bool | None:
    """Send the tenant's newest checkpoint to ``witness`` and record what came of it: True
    when its cosignature was stored, False when the attempt failed (to be retried after
    :data:`BACKOFF`), None when there was nothing to do or another sender holds the claim."""
    now = now or timezone.now()
    state = _claim(witness, tenant_id, now)
    if state is None:
        return None
    checkpoint = Checkpoint.objects.filter(tenant_id=tenant_id).order_by("-size").first()
    if checkpoint is None:
        WitnessState.objects.filter(pk=state.pk).update(claimed_until=None)
        return None
    attempt = _Attempt(old=state.size)
    try:
        for _ in range(1 + RESYNCS):
            outcome = _ask(witness, checkpoint, attempt.old)
            if isinstance(outcome, _Resync):
                attempt.resyncs.append(outcome.size)
                attempt.old = outcome.size
                continue
            attempt.outcome = outcome
            break
        else:
            attempt.outcome = _Failed(409, f"the witness changed its size {RESYNCS + 1} times in one attempt")
    except Exception as exc:  # our side broke (a proof's node unreadable): back off, as for the far side
        log.exception("witness %s, tenant %s: the attempt failed here", witness.key.name, tenant_id)
        attempt.outcome = _Failed(None, f"the site could not make the request: {type(exc).__name__}")
    return _record(witness, state, checkpoint, attempt, now)


def _ask(witness: Witness, checkpoint: Checkpoint, old: int) -> _Cosigned | _Resync | _Failed:
    """One ``add-checkpoint`` request from ``old``, and what its answer means."""
    size = checkpoint.size
    if old > size:
        return _Failed(None, f"the witness has cosigned size {old}, past the newest checkpoint ({size})")
    proof = [] if old in (0, size) else consistency_proof(old, size, node_reader(checkpoint.tenant_id))
    answer = _post(witness.endpoint, add_checkpoint_body(old, proof, checkpoint.note))
    if answer.status is None:
        return _Failed(None, answer.error)
    said = _shown(answer.body)
    if answer.status == 409:
        match = _SIZE.fullmatch(answer.body.decode("ascii", errors="replace"))
        if not answer.content_type.startswith(SIZE_TYPE) or match is None:
            return _Failed(409, f"409 without a {SIZE_TYPE} size: {said}")
        known = int(match.group(1))
        if known != old:
            return _Resync(known)
        return _Failed(
            409,
            f"the witness refuses size {size} from {old}, the size it says it cosigned: it holds "
            f"another tree of size {old} than this log's",
            alarm=True,
        )
    if answer.status != 200:
        return _Failed(answer.status, f"HTTP {answer.status}: {said}")
    text = checkpoint.note[: checkpoint.note.rindex("\n\n") + 1]  # the checkpoint, without its signatures
    try:
        lines = answer.body.decode("utf-8").splitlines()
        found = verify_cosignatures(text, lines, [witness.key])
    except (NoteError, UnicodeDecodeError) as exc:
        return _Failed(200, f"cosignature refused: {exc}", alarm=True)
    if not found:
        return _Failed(200, f"no cosignature by {witness.key.name} {witness.key.key_id.hex()} in the answer")
    return _Cosigned(found)


def _record(
    witness: Witness, state: WitnessState, checkpoint: Checkpoint, attempt: _Attempt, now: datetime
) -> bool:
    outcome = attempt.outcome
    where = (
        f"witness {witness.key.name} ({witness.url}), tenant {checkpoint.tenant_id}, size {checkpoint.size}"
    )
    if attempt.resyncs:
        log.info("%s: the witness had cosigned size %s; sent again from it", where, attempt.resyncs[-1])
    if isinstance(outcome, _Cosigned):
        with transaction.atomic():
            for cosignature in outcome.cosignatures:
                WitnessCosignature.objects.get_or_create(
                    checkpoint=checkpoint,
                    witness=cosignature.key.name,
                    key_id=cosignature.key.key_id.hex(),
                    defaults={
                        "timestamp": cosignature.timestamp,
                        "line": cosignature.line,
                        "received_at": now,
                    },
                )
            WitnessState.objects.filter(pk=state.pk).update(
                size=checkpoint.size,
                failures=0,
                due_at=None,
                claimed_until=None,
                last_attempt_at=now,
                last_status=200,
                last_error="",
                cosigned_at=now,
            )
        return True
    assert isinstance(outcome, _Failed)
    failures = state.failures + 1
    wait = BACKOFF[min(failures, len(BACKOFF)) - 1]
    (log.error if outcome.alarm else log.warning)(
        "%s: not cosigned (%s); attempt %d, again in %gs", where, outcome.error, failures, wait
    )
    WitnessState.objects.filter(pk=state.pk).update(
        size=attempt.old,
        failures=failures,
        due_at=now + timedelta(seconds=wait),
        claimed_until=None,
        last_attempt_at=now,
        last_status=outcome.status,
        last_error=outcome.error[:1000],
    )
    return False


def _shown(body: bytes) -> str:
    """The start of a witness's answer, for a log line: printable, short."""
    text = body[:200].decode("utf-8", errors="replace")
    return "".join(c if c.isprintable() else " " for c in text).strip() or "(empty)"


def _post(url: str, body: bytes) -> _Answer:
    """POST ``body`` to ``url``; never raises for the far side (no redirect is followed)."""
    parts = urlsplit(url)
    timeout = float(settings.KEELGATE_AUDIT_WITNESS_TIMEOUT_SECONDS)
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = kind(parts.hostname or "", parts.port, timeout=timeout)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        conn.request(
            "POST",
            path,
            body=body,
            headers={"User-Agent": USER_AGENT, "Content-Type": "text/plain; charset=utf-8"},
        )
        response = conn.getresponse()
        return _Answer(response.status, response.getheader("Content-Type", ""), response.read(MAX_ANSWER))
    except (OSError, http.client.HTTPException) as exc:
        return _Answer(None, error=f"{type(exc).__name__}: {exc}"[:300])
    finally:
        conn.close()


def serve(stop: threading.Event, *, poll: float = POLL_SECONDS) -> None:
    """Pass after pass until ``stop`` is set: ``keelgate_sequencer``'s witness thread."""
    try:
        witnesses = configured_witnesses()
        while not stop.is_set():
            try:
                witness_pass(witnesses=witnesses)
            except Exception:  # a broken pass must not end the thread: log it, try again
                log.exception("witness pass failed")
                connection.close()
            stop.wait(poll)
    finally:
        connection.close()
