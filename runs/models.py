"""The engine's state in the database: runs, every checkpoint, and idempotency keys.

Also the API's ``Idempotency-Key`` headers of ``POST /runs`` (:class:`ApiIdempotencyKey`),
a promise about starting runs, kept by ``runs.idempotency_keys``.

The checkpoint JSON is the truth about a run; ``Run`` is a projection of it for lists
and filters, plus the worker's lease (owner, expiry and a fencing epoch).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q, Subquery
from django.db.models.functions import Coalesce

from keelgate.checkpoint import CheckpointCodec, StoredCheckpoint
from keelgate.errors import CheckpointUnreadableError


class RunStatus(models.TextChoices):
    """Where a run stands for the worker."""

    QUEUED = "queued", "Queued"
    """Runnable: new, resumed, approved or reconciled. A worker will claim it."""
    RUNNING = "running", "Running"
    """Claimed by a worker under a lease."""
    WAITING = "waiting", "Waiting for a person"
    """Stopped on a pending approval or an unknown outcome."""
    STOPPED = "stopped", "Stopped"
    """A budget stop or an error: resumable with a new budget."""
    DONE = "done", "Done"
    CANCELLED = "cancelled", "Cancelled"
    """A person cancelled it: it never continues (its approvals were withdrawn)."""


class Run(models.Model):
    """One agent run of one tenant."""

    tenant_id = models.CharField(max_length=63)
    run_id = models.CharField(max_length=128)
    agent = models.CharField(max_length=64)
    goal = models.TextField()
    trace_id = models.CharField(max_length=64, blank=True)
    as_of = models.DateTimeField()
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.QUEUED)
    phase = models.CharField(max_length=16, default="plan")
    stop_reason = models.CharField(max_length=32, blank=True)
    outcome = models.CharField(max_length=32, blank=True, default="")
    """What happened, once the run ended (``runs.outcomes.RunOutcome``); empty while it has not.
    Written with the status, by ``runs.services.run_move``."""
    error_code = models.CharField(max_length=64, blank=True)
    limits = models.JSONField(default=dict)
    pending_limits = models.JSONField(null=True, blank=True)
    """New stop conditions for the next resume (set by a person, consumed by the worker)."""
    usage = models.JSONField(default=dict)
    iteration = models.IntegerField(default=0)
    seq = models.IntegerField(default=0)
    lease_owner = models.CharField(max_length=128, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    lease_epoch = models.BigIntegerField(default=0)
    """Fencing token: bumped on every claim; every write of the holder checks it."""
    attempts = models.IntegerField(default=0)
    cancel_requested_by = models.CharField(max_length=150, blank=True)
    """Who asked to cancel the run while a worker held it: the worker stops it at the next
    phase boundary (and empty when nobody did)."""
    created_by = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant_id", "run_id"], name="run_unique_per_tenant")]
        indexes = [
            models.Index(fields=["tenant_id", "status", "-updated_at"], name="run_list"),
            models.Index(fields=["tenant_id", "-created_at"], name="run_recent"),
            models.Index(fields=["status", "lease_expires_at"], name="run_claim"),
            models.Index(fields=["tenant_id", "outcome", "-created_at"], name="run_outcome"),
        ]

    def __str__(self) -> str:
        return f"{self.tenant_id}/{self.run_id}"


@dataclass(frozen=True)
class CheckpointEntry:
    """One stored checkpoint, decoded: its JSON exactly as saved."""

    seq: int
    phase: str
    saved_at: datetime
    text: str


class CheckpointManager(models.Manager["Checkpoint"]):
    """Every read of a checkpoint's JSON goes through here: the rows are stored deflated.

    Each method reads from the run's newest keyframe at or before what it wants, in one
    query, and decodes with :class:`keelgate.checkpoint.CheckpointCodec` (a store passes
    its own, so what it reads becomes the base of its next save).
    """

    def chain_texts(
        self,
        tenant_id: str,
        run_id: str,
        codec: CheckpointCodec | None = None,
        *,
        rows: Iterable[Sequence[Any]] | None = None,
    ) -> list[str]:
        """The JSON of the run's checkpoints from its newest keyframe on: the last is the latest.

        Empty if the run has no checkpoint. ``rows``: those rows (``seq, base_seq, data,
        state``), read already by the caller (the PostgreSQL store's prepared statement).
        """
        codec = codec or CheckpointCodec()
        if rows is None:
            run = self.filter(tenant_id=tenant_id, run_id=run_id)
            keyframe = run.filter(base_seq__isnull=True).order_by("-seq").values("seq")[:1]
            newest = run.filter(seq__gte=Coalesce(Subquery(keyframe), 0)).order_by("seq")
            rows = newest.values_list("seq", "base_seq", "data", "state")
        try:
            return codec.decode(tenant_id, run_id, map(_stored, rows))
        except CheckpointUnreadableError:
            # A delta based below the newest keyframe (only after a racing foreign
            # write): decode the whole run; a damaged row raises again.
            return [e.text for e in self.entries(tenant_id, run_id, codec=codec)]

    def entries(
        self,
        tenant_id: str,
        run_id: str,
        *,
        after_seq: int = 0,
        limit: int | None = None,
        codec: CheckpointCodec | None = None,
    ) -> list[CheckpointEntry]:
        """The run's checkpoints with ``seq > after_seq``, oldest first, at most ``limit``."""
        codec = codec or CheckpointCodec()
        window = bool(after_seq) or limit is not None
        rows = self.filter(tenant_id=tenant_id, run_id=run_id)
        if window:
            keyframes = rows.filter(base_seq__isnull=True, seq__lte=after_seq + 1).order_by("-seq")
            rows = rows.filter(seq__gte=Coalesce(Subquery(keyframes.values("seq")[:1]), 0))
        if limit is not None:
            wanted = self.filter(tenant_id=tenant_id, run_id=run_id, seq__gt=after_seq).order_by("seq")
            rows = rows.filter(seq__lte=Coalesce(Subquery(wanted.values("seq")[limit - 1 : limit]), _MAX_SEQ))
        found = list(
            rows.order_by("seq").values_list("seq", "base_seq", "data", "state", "phase", "saved_at")
        )
        try:
            # Without a limit the last row read is the run's latest: the codec remembers it.
            texts = codec.decode(tenant_id, run_id, map(_stored, found), latest=limit is None)
        except CheckpointUnreadableError:
            if not window:
                raise
            every = self.entries(tenant_id, run_id, codec=codec)
            return [e for e in every if e.seq > after_seq][:limit]
        entries = [CheckpointEntry(r[0], r[4], r[5], text) for r, text in zip(found, texts, strict=True)]
        return [e for e in entries if e.seq > after_seq][:limit]

    def texts_at(self, runs: Iterable[tuple[str, str, int]]) -> dict[tuple[str, str], str]:
        """The JSON of checkpoint ``seq`` of each ``(tenant_id, run_id, seq)``, in one query."""
        wanted = Q()
        seqs = {}
        for tenant_id, run_id, seq in runs:
            run = self.filter(tenant_id=tenant_id, run_id=run_id)
            keyframe = run.filter(base_seq__isnull=True, seq__lte=seq).order_by("-seq").values("seq")[:1]
            start = Coalesce(Subquery(keyframe), 0)
            wanted |= Q(tenant_id=tenant_id, run_id=run_id, seq__lte=seq, seq__gte=start)
            seqs[(tenant_id, run_id)] = seq
        if not seqs:
            return {}
        by_run: dict[tuple[str, str], list[StoredCheckpoint]] = {}
        rows = self.filter(wanted).order_by("tenant_id", "run_id", "seq")
        for tenant_id, run_id, *row in rows.values_list(
            "tenant_id", "run_id", "seq", "base_seq", "data", "state"
        ):
            by_run.setdefault((tenant_id, run_id), []).append(_stored(row))
        codec = CheckpointCodec()
        return {
            key: codec.decode(*key, stored, latest=False)[-1]
            for key, stored in by_run.items()
            if stored[-1].seq == seqs[key]
        }

    def rekey(self, tenant_id: str, run_id: str, *, first_kept: int) -> int:
        """Store as keyframes the rows from ``first_kept`` on that are based on an older row.

        Pruning calls it in its transaction before it deletes the rows before
        ``first_kept``: every remaining row still decodes. Returns how many it rewrote.
        """
        rows = self.filter(tenant_id=tenant_id, run_id=run_id)
        based_below = set(
            rows.filter(seq__gte=first_kept, base_seq__lt=first_kept).values_list("seq", flat=True)
        )
        if not based_below:
            return 0
        codec = CheckpointCodec()
        for entry in self.entries(tenant_id, run_id, after_seq=first_kept - 1, codec=codec):
            if entry.seq in based_below:
                data = codec.keyframe(tenant_id, run_id, entry.seq, entry.text)
                rows.filter(seq=entry.seq).update(data=data, base_seq=None)
        return len(based_below)


_MAX_SEQ = 2**31 - 1


def _stored(row: Sequence[Any]) -> StoredCheckpoint:
    """A row ``(seq, base_seq, data, state, ..)`` as the codec reads it."""
    data = row[2]
    return StoredCheckpoint(row[0], row[1], None if data is None else bytes(data), row[3] or "")


class Checkpoint(models.Model):
    """One saved LoopState; every one is kept, ordered by ``seq``.

    Stored deflated against the run's previous checkpoint (``keelgate.checkpoint.
    CheckpointCodec``): read the JSON through ``Checkpoint.objects`` (its
    :class:`CheckpointManager` methods), never from the columns.
    """

    tenant_id = models.CharField(max_length=63)
    run_id = models.CharField(max_length=128)
    seq = models.IntegerField()
    phase = models.CharField(max_length=16)
    trace_id = models.CharField(max_length=64, blank=True)
    state = models.TextField(blank=True)
    """The LoopState JSON of a row saved before the encoding; empty since (``data`` holds it)."""
    data = models.BinaryField(null=True)
    """The JSON as a zlib stream: alone (a keyframe) or against row ``base_seq``'s text."""
    base_seq = models.IntegerField(null=True)
    """The seq of the row ``data`` was deflated against; NULL for a keyframe or an old row."""
    saved_at = models.DateTimeField(auto_now_add=True)

    objects = CheckpointManager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant_id", "run_id", "seq"], name="checkpoint_seq_unique")
        ]
        indexes = [models.Index(fields=["tenant_id", "trace_id"], name="checkpoint_trace")]


class IdempotencyRecord(models.Model):
    """One idempotency key: in flight, completed (with its outcome) or abandoned."""

    tenant_id = models.CharField(max_length=63)
    key = models.CharField(max_length=128)
    status = models.CharField(max_length=16)
    owner = models.CharField(max_length=128)
    run_id = models.CharField(max_length=128)
    action_id = models.CharField(max_length=64)
    claimed_at = models.DateTimeField()
    lease_expires_at = models.DateTimeField()
    completed_at = models.DateTimeField(null=True, blank=True)
    outcome = models.TextField(null=True, blank=True)
    settled_by = models.CharField(max_length=150, null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant_id", "key"], name="idempotency_key_unique")]


class GraphCheckpoint(models.Model):
    """One LangGraph checkpoint of a tenant's thread (``keelgate.contrib.langgraph.KeelgateSaver``).

    The saver writes these tables with its own SQL (one text for every database), so
    the columns and the table name are exactly the stdlib saver's.
    """

    tenant_id = models.CharField(max_length=63)
    thread_id = models.CharField(max_length=255)
    checkpoint_ns = models.CharField(max_length=255)
    checkpoint_id = models.CharField(max_length=64)
    parent_checkpoint_id = models.CharField(max_length=64, null=True)
    run_id = models.CharField(max_length=255, null=True)
    type = models.CharField(max_length=32)
    checkpoint = models.BinaryField()
    metadata_type = models.CharField(max_length=32)
    metadata = models.BinaryField()

    class Meta:
        db_table = "kg_graph_checkpoints"
        constraints = [
            models.UniqueConstraint(
                fields=["tenant_id", "thread_id", "checkpoint_ns", "checkpoint_id"],
                name="graph_checkpoint_key",
            )
        ]
        indexes = [models.Index(fields=["tenant_id", "run_id"], name="graph_checkpoint_run")]


class GraphWrite(models.Model):
    """One pending write of a task, against the LangGraph checkpoint it follows."""

    tenant_id = models.CharField(max_length=63)
    thread_id = models.CharField(max_length=255)
    checkpoint_ns = models.CharField(max_length=255)
    checkpoint_id = models.CharField(max_length=64)
    task_id = models.CharField(max_length=255)
    idx = models.IntegerField()
    channel = models.TextField()
    type = models.CharField(max_length=32)
    value = models.BinaryField()
    task_path = models.TextField()

    class Meta:
        db_table = "kg_graph_writes"
        constraints = [
            models.UniqueConstraint(
                fields=["tenant_id", "thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx"],
                name="graph_write_key",
            )
        ]


class ApiIdempotencyKey(models.Model):
    """One ``Idempotency-Key`` header of ``POST /runs``: in progress, or done with its run.

    Scoped to a tenant and a user, as Stripe scopes keys to an account. ``fingerprint``
    is a hash of the request, so the same key with another body is refused. Until
    ``runs/0006`` it lived in ``tenants`` (its rows moved with it, table renamed).
    """

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=64)
    run_id = models.CharField(max_length=128, blank=True)
    created_at = models.DateTimeField()
    completed_at = models.DateTimeField(null=True, blank=True)
    """Null while the first request is still in progress."""

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "user", "key"], name="api_idempotency_key_unique")
        ]
