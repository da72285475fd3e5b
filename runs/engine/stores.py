"""The engine's checkpoint and idempotency stores on the Django ORM.

They pass the same contract suites as the engine's own stores (``keelgate.testing``),
on SQLite and PostgreSQL, and hold the same JSON, so a run can move between them.
Saving a checkpoint also updates the ``Run`` projection in the same transaction, and
announces ``runs.signals.checkpoint_saved`` inside it, so the inbox (projected by the
``approvals`` app) can never disagree with the checkpoint either.
"""

from __future__ import annotations

import functools
import json
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from keelgate.errors import KeyNotOwnedError, StaleCheckpointError
from keelgate.idempotency import ClaimStatus, IdempotencyRecord, KeyStatus
from keelgate.loop import LoopState
from runs.engine.commits import DjangoCommitGroup
from runs.engine.fencing import Fence
from runs.models import Checkpoint, Run
from runs.models import IdempotencyRecord as KeyRow
from runs.signals import checkpoint_saved
from sitekit.db import insert_sql, unique_or_none


class DjangoCheckpointStore:
    """Checkpoints in the database; keeps every one, so history is available.

    A run with a ``Run`` row (every run the site starts) is checked for staleness by
    the projection's own ``UPDATE .. WHERE seq < new``: one statement that also locks
    the row until the commit, so two savers of one seq cannot both pass. A run without
    one (the engine's contract suite) falls back to reading the latest seq.
    """

    def __init__(self, *, fence: Fence | None = None, group: DjangoCommitGroup | None = None) -> None:
        self.commit_group = group or DjangoCommitGroup(fence)

    @property
    def fence(self) -> Fence | None:
        return self.commit_group.fence

    def save(self, state: LoopState) -> None:
        """Insert a newer checkpoint and project it; refuse one that is not newer."""
        text = state.to_json()
        with self.commit_group.write():
            if _project(state) == 0:
                latest = (
                    Checkpoint.objects.filter(tenant_id=state.tenant_id, run_id=state.run_id)
                    .order_by("-seq")
                    .values_list("seq", flat=True)
                    .first()
                )
                if latest is not None and latest >= state.seq:
                    raise StaleCheckpointError(f"{state.run_id} seq {state.seq} <= {latest}")
                if Run.objects.filter(tenant_id=state.tenant_id, run_id=state.run_id).exists():
                    raise StaleCheckpointError(f"{state.run_id} seq {state.seq} is not newer")
                try:
                    with transaction.atomic():
                        _insert(state, text)
                except IntegrityError as exc:  # a concurrent writer inserted this seq first
                    raise StaleCheckpointError(f"{state.run_id} seq {state.seq}") from exc
            else:
                _insert(state, text)
            checkpoint_saved.send(sender=DjangoCheckpointStore, state=state)

    def load(self, tenant_id: str, run_id: str) -> LoopState | None:
        """The newest checkpoint of the run in this tenant, or None."""
        text = (
            Checkpoint.objects.filter(tenant_id=tenant_id, run_id=run_id)
            .order_by("-seq")
            .values_list("state", flat=True)
            .first()
        )
        return None if text is None else LoopState.from_json(text)

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
        rows = Checkpoint.objects.filter(tenant_id=tenant_id, run_id=run_id).order_by("seq")
        return [LoopState.from_json(text) for text in rows.values_list("state", flat=True)]

    def find_by_trace(self, tenant_id: str, trace_id: str) -> str | None:
        """The run id whose checkpoints carry ``trace_id``, within one tenant."""
        return (
            Checkpoint.objects.filter(tenant_id=tenant_id, trace_id=trace_id)
            .order_by("-id")
            .values_list("run_id", flat=True)
            .first()
        )


_CHECKPOINT_COLUMNS = ("tenant_id", "run_id", "seq", "phase", "trace_id", "state", "saved_at")


def _insert(state: LoopState, text: str) -> None:
    params: list[Any] = [
        state.tenant_id,
        state.run_id,
        state.seq,
        state.phase.value,
        state.trace_id,
        text,
        connection.ops.adapt_datetimefield_value(timezone.now()),
    ]
    with connection.cursor() as cursor:
        cursor.execute(insert_sql(Checkpoint, _CHECKPOINT_COLUMNS), params)


def _project(state: LoopState) -> int:
    """Move the Run row to this checkpoint if it is newer; 0 if stale or there is no row."""
    params = [
        state.phase.value,
        state.stop_reason.value if state.stop_reason else "",
        state.error.code if state.error else "",
        json.dumps(state.usage.model_dump()),
        json.dumps(state.limits.model_dump()),
        state.iteration,
        state.seq,
        state.trace_id,
        state.tenant_id,
        state.run_id,
        state.seq,
    ]
    with connection.cursor() as cursor:
        cursor.execute(_project_sql(connection.vendor), params)
        return int(cursor.rowcount)


@functools.cache
def _project_sql(vendor: str) -> str:
    """The projection's UPDATE, by hand: it runs at every checkpoint save."""
    qn = connection.ops.quote_name
    json_value = "%s::jsonb" if vendor == "postgresql" else "%s"
    columns = ("phase", "stop_reason", "error_code", "usage", "limits", "iteration", "seq", "trace_id")
    assignments = ", ".join(
        f"{qn(column)} = {json_value if column in ('usage', 'limits') else '%s'}" for column in columns
    )
    return (
        f"UPDATE {qn(Run._meta.db_table)} SET {assignments}"
        f" WHERE {qn('tenant_id')} = %s AND {qn('run_id')} = %s AND {qn('seq')} < %s"
    )


class DjangoIdempotencyStore:
    """Idempotency keys in the database, with the claim fenced by the worker's lease."""

    def __init__(self, *, fence: Fence | None = None, group: DjangoCommitGroup | None = None) -> None:
        self.commit_group = group or DjangoCommitGroup(fence)

    @property
    def fence(self) -> Fence | None:
        return self.commit_group.fence

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

        ``INSERT .. ON CONFLICT DO NOTHING RETURNING``: the loser learns it lost without
        an error, so no savepoint is needed and a grouped transaction stays usable.
        """
        _aware(now)
        expires = now + timedelta(seconds=lease_seconds)
        with self.commit_group.write():
            inserted = _insert_key(tenant_id, key, owner, run_id, action_id, now, expires)
        if inserted:
            record = IdempotencyRecord(
                tenant_id=tenant_id,
                key=key,
                status=KeyStatus.IN_FLIGHT,
                owner=owner,
                run_id=run_id,
                action_id=action_id,
                claimed_at=now,
                lease_expires_at=expires,
            )
            return ClaimStatus.CLAIMED, record
        row = KeyRow.objects.get(tenant_id=tenant_id, key=key)
        return ClaimStatus(row.status), _record(row)

    def complete(
        self, tenant_id: str, key: str, *, owner: str, outcome: str, now: datetime
    ) -> IdempotencyRecord:
        """Store the outcome if ``owner`` still holds the key in flight."""
        _aware(now)
        with self.commit_group.write():
            updated = KeyRow.objects.filter(
                tenant_id=tenant_id, key=key, status=KeyStatus.IN_FLIGHT.value, owner=owner
            ).update(status=KeyStatus.COMPLETED.value, outcome=outcome, completed_at=now)
        if updated != 1:
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
        _aware(now)
        status = KeyStatus.COMPLETED if executed else KeyStatus.ABANDONED
        with self.commit_group.write():
            updated = KeyRow.objects.filter(
                tenant_id=tenant_id, key=key, status=KeyStatus.IN_FLIGHT.value
            ).update(status=status.value, outcome=outcome, completed_at=now, settled_by=by)
        if updated != 1:
            raise KeyNotOwnedError(key)
        return _record(KeyRow.objects.get(tenant_id=tenant_id, key=key))

    def get(self, tenant_id: str, key: str) -> IdempotencyRecord | None:
        """The record, or None."""
        row = unique_or_none(KeyRow.objects.filter(tenant_id=tenant_id, key=key))
        return None if row is None else _record(row)


def _insert_key(
    tenant_id: str, key: str, owner: str, run_id: str, action_id: str, now: datetime, expires: datetime
) -> bool:
    """True if this call inserted the in-flight key, False if it existed already."""
    stamp = connection.ops.adapt_datetimefield_value
    params = (tenant_id, key, KeyStatus.IN_FLIGHT.value, owner, run_id, action_id, stamp(now), stamp(expires))
    with connection.cursor() as cursor:
        cursor.execute(insert_sql(KeyRow, _KEY_COLUMNS, _CLAIM_TAIL), params)
        return cursor.fetchone() is not None


_KEY_COLUMNS = (
    "tenant_id",
    "key",
    "status",
    "owner",
    "run_id",
    "action_id",
    "claimed_at",
    "lease_expires_at",
)
_CLAIM_TAIL = ' ON CONFLICT ("tenant_id", "key") DO NOTHING RETURNING "id"'


def _aware(now: datetime) -> None:
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
