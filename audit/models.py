"""The audit chain in the database: append-only events and a per-tenant head row.

The head row is what appends lock (``SELECT ... FOR UPDATE`` on PostgreSQL; SQLite
serialises writers with ``BEGIN IMMEDIATE``), so two writers can never fork a chain.
"""

from __future__ import annotations

from django.db import models


class ChainHead(models.Model):
    """The newest event of one tenant's chain."""

    tenant_id = models.CharField(max_length=63, primary_key=True)
    seq = models.BigIntegerField(default=0)
    hash = models.CharField(max_length=64)


class AuditEvent(models.Model):
    """One link of a tenant's chain: ``hash = sha256(prev_hash || canonical bytes)``."""

    tenant_id = models.CharField(max_length=63)
    seq = models.BigIntegerField()
    at = models.CharField(max_length=40)
    """ISO-8601 text exactly as hashed, so a round trip cannot change the bytes."""
    actor = models.CharField(max_length=200)
    kind = models.CharField(max_length=64)
    body = models.TextField()
    """Canonical JSON text."""
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant_id", "seq"], name="audit_seq_unique")]
        ordering = ["tenant_id", "seq"]

    def __str__(self) -> str:
        return f"{self.tenant_id}#{self.seq} {self.kind}"
