"""A tenant's audit log in the database: events, the tree over them, and signed checkpoints.

Each tenant's events are the leaves of an RFC 6962 Merkle tree in sequence order (the
event numbered n is leaf n-1). A writer inserts a ``PendingEvent`` in its own
transaction; it is *sequenced* into an ``AuditEvent`` (numbered, its leaf and the
subtrees it completes stored, the head moved) in one transaction under the tenant's
``ChainHead`` row lock, by the writer itself (SQLite) or by the sequencer
(``audit.sequencer``) or the next reader.

Events written before the tree (``version`` 1) also link into a sha256 hash chain
(``prev_hash``, ``hash``), and keep verifying under it; they are leaves too.

A tenant's oldest events may be *retired* after their retention period
(:mod:`audit.retention`): archived to a verified bundle, then deleted below a cut
(``ChainHead.retired_below``), while every ``TreeNode`` stays.
"""

from __future__ import annotations

from django.db import models

LEGACY_CHAIN = 1
"""An event written before the cut-over: hash-chained, and a leaf of the tree."""
TREE_LEAF = 2
"""An event written since: a leaf of the tree, not chained."""


class ChainHead(models.Model):
    """The head of one tenant's log: how many events are sequenced, the tree's root over them.

    Locked by whoever sequences (``SELECT ... FOR UPDATE``); its ``seq`` moves only with
    the events it numbers, so a reader of ``seq`` never sees a number before its event.
    """

    tenant_id = models.CharField(max_length=63, primary_key=True)
    seq = models.BigIntegerField(default=0)
    """The newest sequenced event's number: the tree's size."""
    hash = models.CharField(max_length=64)
    """The hash of the last hash-chained event (``version`` 1); frozen since the cut-over."""
    chain_seq = models.BigIntegerField(default=0)
    """The number of the last hash-chained event (0 for a tenant whose log began as a tree)."""
    root = models.CharField(max_length=64, default="")
    """The tree's root over ``seq`` leaves, hex ("" for an empty tree)."""
    retired_below = models.BigIntegerField(default=1, db_default=1)
    """Events numbered below this were retired (archived, then deleted: ``audit.retention``);
    1 while none were. Their subtree hashes stay, so the tree and its proofs are whole. A
    database default too, so a process of the release before, running while this column
    is added, still inserts a head."""


class PendingEvent(models.Model):
    """An event its writer committed, not yet numbered: the sequencer's queue, oldest first."""

    tenant_id = models.CharField(max_length=63)
    at = models.CharField(max_length=40)
    actor = models.CharField(max_length=200)
    kind = models.CharField(max_length=64)
    body = models.TextField()
    run_id = models.CharField(max_length=128, default="", blank=True)
    tool = models.CharField(max_length=200, default="", blank=True)

    class Meta:
        indexes = [models.Index(fields=["tenant_id", "id"], name="audit_pending_order")]


class AuditEvent(models.Model):
    """One numbered event of a tenant's log."""

    tenant_id = models.CharField(max_length=63)
    seq = models.BigIntegerField()
    at = models.CharField(max_length=40)
    """ISO-8601 text exactly as hashed, so a round trip cannot change the bytes."""
    actor = models.CharField(max_length=200)
    kind = models.CharField(max_length=64)
    body = models.TextField()
    """Canonical JSON text."""
    run_id = models.CharField(max_length=128, default="", blank=True)
    """The body's ``run_id``, if any, kept for filtering."""
    tool = models.CharField(max_length=200, default="", blank=True)
    """The body's ``tool``, if any, kept for filtering."""
    version = models.PositiveSmallIntegerField(default=TREE_LEAF)
    """:data:`LEGACY_CHAIN` or :data:`TREE_LEAF`: which form this event was written in."""
    leaf_hash = models.CharField(max_length=64, default="", blank=True)
    """The tree leaf's hash, hex, once integrated."""
    prev_hash = models.CharField(max_length=64, default="", blank=True)
    """Hash-chained events only: the previous event's ``hash``."""
    hash = models.CharField(max_length=64, default="", blank=True)
    """Hash-chained events only: ``sha256(prev_hash || canonical bytes)``."""

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant_id", "seq"], name="audit_seq_unique")]
        indexes = [
            models.Index(fields=["tenant_id", "kind", "seq"], name="audit_kind_seq"),
            models.Index(fields=["tenant_id", "run_id", "seq"], name="audit_run_seq"),
            models.Index(fields=["tenant_id", "actor", "seq"], name="audit_actor_seq"),
        ]
        ordering = ["tenant_id", "seq"]

    def __str__(self) -> str:
        return f"{self.tenant_id}#{self.seq} {self.kind}"


class TreeNode(models.Model):
    """The hash of one complete subtree of a tenant's tree: level 0 is a leaf.

    Node ``(level, index)`` covers leaves ``[index * 2**level, (index + 1) * 2**level)``;
    every root and proof at any size is built from O(log n) of them
    (:mod:`keelgate.audit`'s Merkle functions). Kept when old events are retired.
    """

    tenant_id = models.CharField(max_length=63)
    level = models.PositiveSmallIntegerField()
    index = models.BigIntegerField()
    hash = models.BinaryField(max_length=32)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant_id", "level", "index"], name="audit_node_unique")
        ]


class Checkpoint(models.Model):
    """A signed checkpoint of a tenant's tree: a C2SP signed note over its size and root."""

    tenant_id = models.CharField(max_length=63)
    size = models.BigIntegerField()
    root = models.CharField(max_length=64)
    """Hex; the note carries it in base64."""
    note = models.TextField()
    """The C2SP signed note exactly as signed: checkpoint body, blank line, signature lines."""
    signed_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant_id", "size"], name="audit_checkpoint_size_unique")
        ]
        ordering = ["tenant_id", "size"]

    def __str__(self) -> str:
        return f"{self.tenant_id} checkpoint {self.size}"


class WitnessCosignature(models.Model):
    """A witness's C2SP ``cosignature/v1`` on one checkpoint, verified with the witness's key
    before it was stored (``audit.witnesses``); served as an extra signature line of the note."""

    checkpoint = models.ForeignKey(Checkpoint, on_delete=models.CASCADE, related_name="cosignatures")
    witness = models.CharField(max_length=200)
    """The witness key's name."""
    key_id = models.CharField(max_length=8)
    """The witness key's id, hex."""
    timestamp = models.BigIntegerField()
    """When the witness signed, POSIX seconds (the cosignature carries it)."""
    line = models.TextField()
    """The signature line as the witness sent it, ``— <name> <base64>`` (no newline)."""
    received_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["checkpoint", "witness", "key_id"], name="audit_cosignature_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.checkpoint} cosigned by {self.witness}"


class WitnessState(models.Model):
    """What the site knows of one witness for one tenant's log: the size it last cosigned,
    and the delivery's attempts (``audit.witnesses``). Claimed under a lease while a request
    is out, so two sequencers never send one witness the same tenant's checkpoint at once."""

    tenant_id = models.CharField(max_length=63)
    witness = models.CharField(max_length=200)
    key_id = models.CharField(max_length=8)
    size = models.BigIntegerField(default=0)
    """The tree size the witness last cosigned (0: none yet), as it last told us: the next
    request's ``old`` size, the consistency proof's start."""
    due_at = models.DateTimeField(null=True, blank=True)
    """No attempt before this (a backoff after a failure); null: as soon as there is a checkpoint."""
    claimed_until = models.DateTimeField(null=True, blank=True)
    """A sender holds the row until then; a sender that died lets it lapse."""
    failures = models.PositiveIntegerField(default=0)
    """Failed attempts since the last cosignature: the backoff step."""
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    last_status = models.PositiveSmallIntegerField(null=True, blank=True)
    """The HTTP status of the last answer; null when there was none (refused, timed out)."""
    last_error = models.TextField(default="", blank=True)
    """Why the last attempt failed ("" after a cosignature)."""
    cosigned_at = models.DateTimeField(null=True, blank=True)
    """When the last cosignature was stored."""

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant_id", "witness", "key_id"], name="audit_witness_unique")
        ]

    def __str__(self) -> str:
        return f"{self.tenant_id} at witness {self.witness}"
