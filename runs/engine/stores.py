"""The engine's checkpoint and idempotency stores on the Django ORM.

They pass the same contract suites as the engine's own stores (``keelgate.testing``),
on SQLite and PostgreSQL, and hold the same JSON, so a run can move between them.
Saving a checkpoint also updates the ``Run`` projection in the same transaction, and
announces ``runs.signals.checkpoint_saved`` inside it, so the inbox (projected by the
``approvals`` app) can never disagree with the checkpoint either.

This is the readable default, what SQLite runs: each write says in ORM terms what it
does. On PostgreSQL the wiring (``runs.engine.loops.database_stores``) hands out
:mod:`runs.engine.stores_postgresql` instead, the same writes as fewer statements sent
ahead of their answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.db.models import Model

from keelgate.checkpoint import CheckpointCodec, EncodedCheckpoint
from keelgate.errors import KeyNotOwnedError, StaleCheckpointError
from keelgate.idempotency import ClaimStatus, IdempotencyRecord, KeyStatus
from keelgate.loop import LoopState
from runs.engine.fencing import Fence
from runs.models import Checkpoint, Run
from runs.models import IdempotencyRecord as KeyRow
from runs.signals import checkpoint_saved
from sitekit.commits import DjangoCommitGroup
from sitekit.db import unique_or_none


class DjangoCheckpointStore:
    """Checkpoints in the database; keeps every one, so history is available.

    A run with a ``Run`` row (every run the site starts) is checked for staleness by
    the projection's own ``UPDATE .. WHERE seq < new``: one statement that also locks
    the row until the commit, so two savers of one seq cannot both pass. A run without
    one (the engine's contract suite) falls back to reading the latest seq.

    Each row holds its JSON deflated against the run's previous checkpoint
    (:class:`keelgate.checkpoint.CheckpointCodec`, whose memo of each run's last text
    lives in this object); every read decodes it back to the saved JSON exactly. A
    delta goes in only if its base row is stored as the memo remembers it, else the
    checkpoint is stored as a keyframe.
    """

    def __init__(
        self,
        *,
        fence: Fence | None = None,
        group: DjangoCommitGroup | None = None,
        locked: Model | None = None,
    ) -> None:
        self.commit_group = group or DjangoCommitGroup(fence)
        self.codec = CheckpointCodec()
        self.locked = locked
        """A row the caller holds locked in the group's transaction, passed on with each
        ``checkpoint_saved`` (a decision's approval)."""

    def save(self, state: LoopState) -> None:
        """Insert a newer checkpoint and project it; refuse one that is not newer."""
        save = Save.of(self.codec, state)  # the loop changes ``state`` after this
        with self.commit_group.write():
            if project(state) == 0:
                refused_or_insert(save)
            else:
                insert(save)
            self.announce(state)

    def announce(self, state: LoopState) -> None:
        """``checkpoint_saved``, inside the saving transaction: the inbox's rows join it."""
        checkpoint_saved.send(
            sender=DjangoCheckpointStore, state=state, writer=self.commit_group.rows, locked=self.locked
        )

    def load(self, tenant_id: str, run_id: str) -> LoopState | None:
        """The newest checkpoint of the run in this tenant, or None."""
        texts = Checkpoint.objects.chain_texts(tenant_id, run_id, self.codec)
        return LoopState.from_json(texts[-1]) if texts else None

    def runs(self, tenant_id: str) -> list[str]:
        """The tenant's run ids, oldest first."""
        first_saves = (
            Checkpoint.objects.filter(tenant_id=tenant_id, seq=1)
            .order_by("id")
            .values_list("run_id", flat=True)
        )
        seen = list(dict.fromkeys(first_saves))
        others = (
            Checkpoint.objects.filter(tenant_id=tenant_id)
            .exclude(run_id__in=seen)
            .order_by("id")
            .values_list("run_id", flat=True)
        )
        return seen + [r for r in dict.fromkeys(others)]

    def history(self, tenant_id: str, run_id: str) -> list[LoopState]:
        """Every checkpoint of the run, oldest first."""
        entries = Checkpoint.objects.entries(tenant_id, run_id, codec=self.codec)
        return [LoopState.from_json(e.text) for e in entries]

    def find_by_trace(self, tenant_id: str, trace_id: str) -> str | None:
        """The run id whose checkpoints carry ``trace_id``, within one tenant."""
        return (
            Checkpoint.objects.filter(tenant_id=tenant_id, trace_id=trace_id)
            .order_by("-id")
            .values_list("run_id", flat=True)
            .first()
        )


# -- saving ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Save:
    """One save in flight, as it was when ``save`` ran (the loop changes the state after it).

    What a later check needs to refuse it, or to store it as a keyframe instead.
    """

    codec: CheckpointCodec
    text: str
    encoded: EncodedCheckpoint
    tenant_id: str
    run_id: str
    seq: int
    phase: str
    trace_id: str

    @classmethod
    def of(cls, codec: CheckpointCodec, state: LoopState) -> Save:
        text = state.to_json()
        encoded = codec.encode(state.tenant_id, state.run_id, state.seq, text)
        return cls(
            codec, text, encoded, state.tenant_id, state.run_id, state.seq, state.phase.value, state.trace_id
        )

    def keyframe(self) -> bytes:
        """The JSON deflated alone (remembered as the run's base from now on)."""
        return self.codec.keyframe(self.tenant_id, self.run_id, self.seq, self.text)

    def refused(self, detail: str) -> StaleCheckpointError:
        self.codec.forget(self.tenant_id, self.run_id)
        return StaleCheckpointError(detail)


def project(state: LoopState) -> int:
    """Move the Run row to this checkpoint if it is newer; 0 if stale or there is no row."""
    return Run.objects.filter(tenant_id=state.tenant_id, run_id=state.run_id, seq__lt=state.seq).update(
        phase=state.phase.value,
        stop_reason=state.stop_reason.value if state.stop_reason else "",
        error_code=state.error.code if state.error else "",
        usage=state.usage.model_dump(),
        limits=state.limits.model_dump(),
        iteration=state.iteration,
        seq=state.seq,
        trace_id=state.trace_id,
    )


def insert(save: Save, *, keyframe: bool = False) -> None:
    """Insert the save: its delta if its base is stored as remembered, else a keyframe."""
    data, base_seq = save.encoded.data, save.encoded.base_seq
    if keyframe or (base_seq is not None and not _base_is_stored(save)):
        data, base_seq = save.keyframe(), None  # a memo left by a rolled-back or refused save
    Checkpoint.objects.create(
        tenant_id=save.tenant_id,
        run_id=save.run_id,
        seq=save.seq,
        phase=save.phase,
        trace_id=save.trace_id,
        state="",
        data=data,
        base_seq=base_seq,
    )


def _base_is_stored(save: Save) -> bool:
    """The delta's base row is stored and ends with the Adler-32 (the checksum of the
    base's text) that the codec remembers."""
    if save.encoded.base_seq is None:
        return True  # a keyframe has no base
    base = Checkpoint.objects.filter(tenant_id=save.tenant_id, run_id=save.run_id, seq=save.encoded.base_seq)
    data = unique_or_none(base.values_list("data", flat=True))
    return data is not None and bytes(data)[-4:] == save.encoded.base_tail


def refused_or_insert(save: Save) -> None:
    """The projection moved nothing: refuse if stale, else (no ``Run`` row) insert if newer."""
    tenant_id, run_id, seq = save.tenant_id, save.run_id, save.seq
    latest = (
        Checkpoint.objects.filter(tenant_id=tenant_id, run_id=run_id)
        .order_by("-seq")
        .values_list("seq", flat=True)
        .first()
    )
    if latest is not None and latest >= seq:
        raise save.refused(f"{run_id} seq {seq} <= {latest}")
    if Run.objects.filter(tenant_id=tenant_id, run_id=run_id).exists():
        raise save.refused(f"{run_id} seq {seq} is not newer")
    try:
        with transaction.atomic():
            insert(save)
    except IntegrityError as exc:  # a concurrent writer inserted this seq first
        raise save.refused(f"{run_id} seq {seq}") from exc


class DjangoIdempotencyStore:
    """Idempotency keys in the database, with the claim fenced by the worker's lease."""

    def __init__(self, *, fence: Fence | None = None, group: DjangoCommitGroup | None = None) -> None:
        self.commit_group = group or DjangoCommitGroup(fence)

    def claim(
        self,
        tenant_id: str,
        key: str,
        *,
        owner: str,
        run_id: str,
        action_id: str,
        now: datetime,
        lease_seconds: float,
    ) -> tuple[ClaimStatus, IdempotencyRecord]:
        """Insert the key if new (one winner, by the unique constraint); else report it.

        The loser's insert fails in a savepoint of its own, so a grouped transaction
        stays usable.
        """
        require_aware(now)
        record = IdempotencyRecord(
            tenant_id=tenant_id,
            key=key,
            status=KeyStatus.IN_FLIGHT,
            owner=owner,
            run_id=run_id,
            action_id=action_id,
            claimed_at=now,
            lease_expires_at=now + timedelta(seconds=lease_seconds),
        )
        try:
            with self.commit_group.write(), transaction.atomic():
                KeyRow.objects.create(
                    **record.model_dump(include=set(_CLAIM_FIELDS)) | {"status": record.status.value}
                )
        except IntegrityError:
            row = self.get(tenant_id, key)
            assert row is not None  # the conflict was on this key, and keys are never deleted
            return ClaimStatus(row.status.value), row
        return ClaimStatus.CLAIMED, record

    def complete(
        self, tenant_id: str, key: str, *, owner: str, outcome: str, now: datetime
    ) -> IdempotencyRecord:
        """Store the outcome if ``owner`` still holds the key in flight."""
        require_aware(now)
        with self.commit_group.write():
            held = KeyRow.objects.filter(
                tenant_id=tenant_id, key=key, status=KeyStatus.IN_FLIGHT.value, owner=owner
            )
            if held.update(status=KeyStatus.COMPLETED.value, outcome=outcome, completed_at=now) != 1:
                raise KeyNotOwnedError(key)
            return _record(KeyRow.objects.get(tenant_id=tenant_id, key=key))

    def settle(
        self,
        tenant_id: str,
        key: str,
        *,
        executed: bool,
        by: str,
        outcome: str | None,
        now: datetime,
    ) -> IdempotencyRecord:
        """Settle an in-flight key as completed or abandoned (the reconcile path)."""
        require_aware(now)
        status = KeyStatus.COMPLETED if executed else KeyStatus.ABANDONED
        with self.commit_group.write():
            in_flight = KeyRow.objects.filter(tenant_id=tenant_id, key=key, status=KeyStatus.IN_FLIGHT.value)
            if in_flight.update(status=status.value, outcome=outcome, completed_at=now, settled_by=by) != 1:
                raise KeyNotOwnedError(key)
            return _record(KeyRow.objects.get(tenant_id=tenant_id, key=key))

    def get(self, tenant_id: str, key: str) -> IdempotencyRecord | None:
        """The record, or None."""
        row = unique_or_none(KeyRow.objects.filter(tenant_id=tenant_id, key=key))
        return None if row is None else _record(row)


_CLAIM_FIELDS = (
    "tenant_id",
    "key",
    "status",
    "owner",
    "run_id",
    "action_id",
    "claimed_at",
    "lease_expires_at",
)


def require_aware(now: datetime) -> None:
    """Refuse a naive time: a key's lease is compared across processes and databases."""
    if now.tzinfo is None:
        raise ValueError("idempotency times must be timezone-aware")


def _record(row: KeyRow) -> IdempotencyRecord:
    return IdempotencyRecord(
        tenant_id=row.tenant_id,
        key=row.key,
        status=KeyStatus(row.status),
        owner=row.owner,
        run_id=row.run_id,
        action_id=row.action_id,
        claimed_at=row.claimed_at,
        lease_expires_at=row.lease_expires_at,
        completed_at=row.completed_at,
        outcome=row.outcome,
        settled_by=row.settled_by,
    )
