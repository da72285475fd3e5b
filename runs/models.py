"""The engine's state in the database: runs, every checkpoint, and idempotency keys.

The checkpoint JSON is the truth about a run; ``Run`` is a projection of it for lists
and filters, plus the worker's lease (owner, expiry and a fencing epoch).
"""

from __future__ import annotations

from django.db import models


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
        ]

    def __str__(self) -> str:
        return f"{self.tenant_id}/{self.run_id}"


class Checkpoint(models.Model):
    """One saved LoopState; every one is kept, ordered by ``seq``."""

    tenant_id = models.CharField(max_length=63)
    run_id = models.CharField(max_length=128)
    seq = models.IntegerField()
    phase = models.CharField(max_length=16)
    trace_id = models.CharField(max_length=64, blank=True)
    state = models.TextField()
    """The LoopState JSON, byte for byte what the engine wrote."""
    saved_at = models.DateTimeField(auto_now_add=True)

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
