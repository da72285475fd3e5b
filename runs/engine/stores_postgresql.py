"""The checkpoint and idempotency stores on PostgreSQL: the ORM stores' writes, by hand.

:mod:`runs.engine.stores` says in ORM terms what each write does; this module does the
same on PostgreSQL in fewer statements and round trips, through the commit group's
PostgreSQL implementation (:mod:`sitekit.postgresql.commits`), which sends a write ahead
of its answer and prepares each statement once per connection. The rows are the same,
so are the reads the ORM does well, and both pass the engine's contract suites
(``tests/site/test_store_contracts.py``). The wiring (``runs.engine.loops``) picks these
on PostgreSQL.

- A worker's lease fence (:class:`ServerFence`) is checked by the server, in the message
  of its transaction's writes: a lost lease fails the statement (``keelgate_refuse``,
  migration ``runs.0004``), and the rest of the message, the commit included, is skipped.
- A checkpoint save is one statement (:data:`SAVE`): the ``Run`` projection's ``UPDATE``,
  only if newer, and the insert, only then and only if a delta's base is stored as
  remembered. A worker's save refuses itself on the server (:data:`REFUSING_SAVE`), so
  its commit can travel with it; any other save's answer is checked before the commit.
- A key's claim is an ``INSERT .. ON CONFLICT DO NOTHING RETURNING``: the loser learns it
  lost without an error, so no savepoint; its transaction commits in the claim's message.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from keelgate.errors import KeyNotOwnedError
from keelgate.idempotency import ClaimStatus, IdempotencyRecord, KeyStatus
from keelgate.loop import LoopState
from runs.engine.fencing import Fence
from runs.engine.stores import (
    DjangoCheckpointStore,
    DjangoIdempotencyStore,
    Save,
    insert,
    refused_or_insert,
    require_aware,
)
from runs.models import Checkpoint, Run
from runs.models import IdempotencyRecord as KeyRow
from sitekit.commits import DjangoCommitGroup, Result

_RUNS = Run._meta.db_table
_CHECKPOINTS = Checkpoint._meta.db_table
_KEYS = KeyRow._meta.db_table


# -- the fence ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServerFence:
    """A worker's lease fence (``sitekit.commits.Guard``) checked by the server, in the
    message of the transaction's writes; its row lock lasts until the commit."""

    fence: Fence

    def check(self, group: DjangoCommitGroup) -> None:
        """Send the refusing check: a lost lease fails the whole transaction on the server."""
        fence = self.fence
        detail = f"{fence.run_id} epoch {fence.epoch} is not "
        group.send(REFUSING_FENCE, [fence.tenant_id, fence.run_id, fence.epoch, detail])


REFUSING_FENCE = (
    f'WITH f AS (SELECT "lease_epoch" FROM "{_RUNS}" WHERE "tenant_id" = %s AND "run_id" = %s FOR UPDATE)'
    " SELECT CASE WHEN (SELECT lease_epoch FROM f) IS NOT DISTINCT FROM %s THEN 1"
    " ELSE keelgate_refuse('lease_lost', %s || coalesce((SELECT lease_epoch FROM f)::text, 'None')) END"
)
"""Lock the run's row and refuse unless its epoch is the fence's."""


# -- checkpoints ----------------------------------------------------------------------------


class PostgresCheckpointStore(DjangoCheckpointStore):
    """:class:`~runs.engine.stores.DjangoCheckpointStore`, saving and loading with this
    module's statements."""

    def save(self, state: LoopState) -> None:
        """Insert a newer checkpoint and project it, in one statement sent with the next
        round trip; refuse one that is not newer."""
        group = self.commit_group
        save = Save.of(self.codec, state)  # the loop changes ``state`` after this
        with group.write():
            params = [*_project_params(state), *_row(save), *_guard_params(save)]
            if group.guard is not None and group.owns_transaction:
                # A worker's save: the fence proves the Run row, and the server refuses
                # a stale save or a delta whose base is not stored, so the commit can
                # travel with it. The codec's memo of the run goes if nothing commits.
                group.send(REFUSING_SAVE, [*params, *_refusal_details(save)])
                group.on_rollback(functools.partial(self.codec.forget, state.tenant_id, state.run_id))
            else:  # its check runs before the commit
                group.send(SAVE, params, functools.partial(_saved_or_refused, save))
            self.announce(state)

    def load(self, tenant_id: str, run_id: str) -> LoopState | None:
        """The newest checkpoint of the run in this tenant, or None (one prepared read)."""
        rows = self.commit_group.query(CHAIN, [tenant_id, run_id, tenant_id, run_id]).rows
        texts = Checkpoint.objects.chain_texts(tenant_id, run_id, self.codec, rows=rows)
        return LoopState.from_json(texts[-1]) if texts else None


def _saved_or_refused(save: Save, result: Result) -> None:
    """The check of a sent save: no row, the projection did not move; else whether it saved.

    Moved but not saved: the delta's base is not stored as remembered (a memo left by a
    rolled-back save), so the checkpoint goes in as a keyframe.
    """
    if not result.rows:
        refused_or_insert(save)
    elif not result.rows[0][0]:
        insert(save, keyframe=True)


def _project_params(state: LoopState) -> list[Any]:
    return [
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


def _row(save: Save) -> list[Any]:
    """The insert's parameters, in ``_CHECKPOINT_COLUMNS`` order."""
    encoded = save.encoded
    return [
        save.tenant_id,
        save.run_id,
        save.seq,
        save.phase,
        save.trace_id,
        "",
        encoded.data,
        encoded.base_seq,
        timezone.now(),
    ]


def _guard_params(save: Save) -> list[Any]:
    """The delta's base check (see :data:`_BASE_IS_STORED`); a keyframe passes it."""
    base, tail = save.encoded.base_seq, save.encoded.base_tail
    return [base, save.tenant_id, save.run_id, base, tail]


def _refusal_details(save: Save) -> list[str]:
    """What the server's refusals say: the save is not newer; its delta's base is gone."""
    return [
        f"{save.run_id} seq {save.seq} is not newer than the run's",
        f"{save.run_id} seq {save.seq}: its base seq {save.encoded.base_seq}"
        " is not as this process remembers it",
    ]


_CHECKPOINT_COLUMNS = (
    "tenant_id",
    "run_id",
    "seq",
    "phase",
    "trace_id",
    "state",
    "data",
    "base_seq",
    "saved_at",
)

_INSERTED = ", ".join(f'"{column}"' for column in _CHECKPOINT_COLUMNS)

_PROJECT = (
    f'UPDATE "{_RUNS}" SET "phase" = %s, "stop_reason" = %s, "error_code" = %s, "usage" = %s::jsonb,'
    ' "limits" = %s::jsonb, "iteration" = %s, "seq" = %s, "trace_id" = %s'
    ' WHERE "tenant_id" = %s AND "run_id" = %s AND "seq" < %s'
)
"""The projection's UPDATE (``runs.engine.stores.project``)."""

_BASE_IS_STORED = (
    f'EXISTS (SELECT 1 FROM "{_CHECKPOINTS}" WHERE "tenant_id" = %s AND "run_id" = %s AND "seq" = %s'
    ' AND substring("data" from octet_length("data") - 3) = %s)'
)
"""The delta's base row is stored and ends with its Adler-32 (the checksum of the base's
text): tenant id, run id, base seq, base tail. One probe of the unique index."""

_SAVE_CTES = (
    f"WITH moved AS ({_PROJECT} RETURNING 1),"
    f' saved AS (INSERT INTO "{_CHECKPOINTS}" ({_INSERTED})'
    f" SELECT {', '.join(['%s'] * len(_CHECKPOINT_COLUMNS))} FROM moved"
    f" WHERE %s::integer IS NULL OR {_BASE_IS_STORED} RETURNING 1)"
)
"""``moved``: the projection's UPDATE, if newer; ``saved``: the insert, only then, and
only if a delta's base check passes."""

SAVE = f"{_SAVE_CTES} SELECT EXISTS (SELECT 1 FROM saved) FROM moved"
"""Answers one row if the projection moved, saying whether the insert ran: a delta whose
base check fails is not inserted, and the check stores it as a keyframe."""

_REFUSE = "keelgate_refuse('stale_checkpoint', %s)"
REFUSING_SAVE = (
    f"{_SAVE_CTES} SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM moved) THEN {_REFUSE}"
    f" WHEN NOT EXISTS (SELECT 1 FROM saved) THEN {_REFUSE} ELSE 1 END"
)
""":data:`SAVE`, refusing on the server instead of answering: not moved (a newer
checkpoint is saved) or moved but not inserted (the delta's base is not the row this
process remembers) is ``stale_checkpoint``, and the rest of the message is skipped."""

CHAIN = (
    f'SELECT "seq", "base_seq", "data", "state" FROM "{_CHECKPOINTS}"'
    ' WHERE "tenant_id" = %s AND "run_id" = %s AND "seq" >= COALESCE((SELECT MAX("seq")'
    f' FROM "{_CHECKPOINTS}" WHERE "tenant_id" = %s AND "run_id" = %s AND "base_seq" IS NULL), 0)'
    ' ORDER BY "seq"'
)
"""The rows a load decodes (``Checkpoint.objects.chain_texts``): from the newest keyframe on."""


# -- idempotency keys -----------------------------------------------------------------------


class PostgresIdempotencyStore(DjangoIdempotencyStore):
    """:class:`~runs.engine.stores.DjangoIdempotencyStore` in one statement per operation."""

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

        The grouped transaction commits in the claim's own message: the gateway makes a
        won claim durable before the tool runs anyway, and a lost one wrote nothing
        that the next flush would not commit as well.
        """
        require_aware(now)
        expires = now + timedelta(seconds=lease_seconds)
        params = (tenant_id, key, KeyStatus.IN_FLIGHT.value, owner, run_id, action_id, now, expires)
        group = self.commit_group
        with group.write():
            inserted = group.query(CLAIM, params, commit=True).rows
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
        row = self.get(tenant_id, key)
        assert row is not None  # the conflict was on this key, and keys are never deleted
        return ClaimStatus(row.status.value), row

    def complete(
        self, tenant_id: str, key: str, *, owner: str, outcome: str, now: datetime
    ) -> IdempotencyRecord:
        """Store the outcome if ``owner`` still holds the key in flight."""
        require_aware(now)
        done, in_flight = KeyStatus.COMPLETED.value, KeyStatus.IN_FLIGHT.value
        return self._update(COMPLETE, [done, outcome, now, None, tenant_id, key, in_flight, owner], key)

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
        params = [status.value, outcome, now, by, tenant_id, key, KeyStatus.IN_FLIGHT.value]
        return self._update(SETTLE, params, key)

    def get(self, tenant_id: str, key: str) -> IdempotencyRecord | None:
        """The record, or None."""
        rows = self.commit_group.query(SELECT_KEY, [tenant_id, key]).rows
        return _record(rows[0]) if rows else None

    def _update(self, sql: str, params: list[Any], key: str) -> IdempotencyRecord:
        group = self.commit_group
        with group.write():
            rows = group.query(sql, params).rows
        if len(rows) != 1:
            raise KeyNotOwnedError(key)
        return _record(rows[0])


_RECORD_COLUMNS = ", ".join(
    f'"{c}"'
    for c in (
        "tenant_id",
        "key",
        "status",
        "owner",
        "run_id",
        "action_id",
        "claimed_at",
        "lease_expires_at",
        "completed_at",
        "outcome",
        "settled_by",
    )
)
CLAIM = (
    f'INSERT INTO "{_KEYS}" ("tenant_id", "key", "status", "owner", "run_id", "action_id", "claimed_at",'
    ' "lease_expires_at") VALUES (%s, %s, %s, %s, %s, %s, %s, %s)'
    ' ON CONFLICT ("tenant_id", "key") DO NOTHING RETURNING "id"'
)
SELECT_KEY = f'SELECT {_RECORD_COLUMNS} FROM "{_KEYS}" WHERE "tenant_id" = %s AND "key" = %s'
_SET_OUTCOME = (
    f'UPDATE "{_KEYS}" SET "status" = %s, "outcome" = %s, "completed_at" = %s,'
    ' "settled_by" = COALESCE(%s, "settled_by") WHERE "tenant_id" = %s AND "key" = %s AND "status" = %s'
)
COMPLETE = f'{_SET_OUTCOME} AND "owner" = %s RETURNING {_RECORD_COLUMNS}'
"""Complete only the owner's in-flight key, keeping ``settled_by`` (``COALESCE`` with NULL)."""
SETTLE = f"{_SET_OUTCOME} RETURNING {_RECORD_COLUMNS}"
"""Settle an in-flight key, whoever holds it, writing ``settled_by``."""


def _record(row: tuple[Any, ...]) -> IdempotencyRecord:
    tenant_id, key, status, owner, run_id, action_id, claimed, expires, completed, outcome, by = row
    return IdempotencyRecord(
        tenant_id=tenant_id,
        key=key,
        status=KeyStatus(status),
        owner=owner,
        run_id=run_id,
        action_id=action_id,
        claimed_at=claimed,
        lease_expires_at=expires,
        completed_at=completed,
        outcome=outcome,
        settled_by=by,
    )
