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
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import Model
from django.utils import timezone

from keelgate.checkpoint import CheckpointCodec, EncodedCheckpoint
from keelgate.errors import KeyNotOwnedError, StaleCheckpointError
from keelgate.idempotency import ClaimStatus, IdempotencyRecord, KeyStatus
from keelgate.loop import LoopState
from runs.engine.fencing import Fence
from runs.models import Checkpoint, Run
from runs.models import IdempotencyRecord as KeyRow
from runs.signals import checkpoint_saved
from sitekit.commits import DjangoCommitGroup, Result
from sitekit.db import insert_sql
from sitekit.postgresql.commits import PostgresCommitGroup


class DjangoCheckpointStore:
    """Checkpoints in the database; keeps every one, so history is available.

    A run with a ``Run`` row (every run the site starts) is checked for staleness by
    the projection's own ``UPDATE .. WHERE seq < new``: one statement that also locks
    the row until the commit, so two savers of one seq cannot both pass. A run without
    one (the engine's contract suite) falls back to reading the latest seq. A worker's
    save on PostgreSQL (fenced, in the group's own transaction) is refused by the server
    itself, so its commit travels in the same message; elsewhere the client checks the
    answer before the commit.

    Each row holds its JSON deflated against the run's previous checkpoint
    (:class:`keelgate.checkpoint.CheckpointCodec`, whose memo of each run's last text
    lives in this object, and is forgotten when a save's transaction rolls back); every
    read decodes it back to the saved JSON exactly.
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
        group = self.commit_group
        save = _Save.of(self.codec, state, group.vendor)  # the loop changes ``state`` after this
        with group.write():
            if isinstance(group, PostgresCommitGroup):
                # Projection and insert in one statement, sent with the next round trip.
                params = [*_project_params(state), *save.row, *save.guard_params()]
                if group.guard is not None and group.owns_transaction:
                    # A worker's save: the fence proves the Run row, and the server refuses
                    # a stale save or a delta whose base is not stored, so the commit can
                    # travel with it. The codec's memo of the run goes if nothing commits.
                    group.send(_refusing_save_sql(), [*params, *save.refusal_details()])
                    group.on_rollback(functools.partial(self.codec.forget, state.tenant_id, state.run_id))
                else:  # its check runs before the commit
                    group.send(_save_sql(), params, functools.partial(_saved_or_refused, save))
            elif _project(state) == 0:
                _refused_or_insert(save)
            else:
                _insert(save)
            checkpoint_saved.send(
                sender=DjangoCheckpointStore, state=state, writer=group.rows, locked=self.locked
            )

    def load(self, tenant_id: str, run_id: str) -> LoopState | None:
        """The newest checkpoint of the run in this tenant, or None."""
        texts = Checkpoint.objects.chain_texts(tenant_id, run_id, self.codec, query=self._rows)
        return LoopState.from_json(texts[-1]) if texts else None

    def _rows(self, sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
        return self.commit_group.query(sql, params).rows

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


@dataclass(frozen=True)
class _Save:
    """One save in flight, as it was when ``save`` ran (the loop changes the state after it).

    What a later check needs to refuse it, or to store it as a keyframe instead.
    """

    codec: CheckpointCodec
    text: str
    encoded: EncodedCheckpoint
    row: list[Any]
    """The insert's parameters, in ``_CHECKPOINT_COLUMNS`` order."""

    @classmethod
    def of(cls, codec: CheckpointCodec, state: LoopState, vendor: str) -> _Save:
        text = state.to_json()
        encoded = codec.encode(state.tenant_id, state.run_id, state.seq, text)
        return cls(codec, text, encoded, _insert_params(state, encoded.data, encoded.base_seq, vendor))

    @property
    def key(self) -> tuple[str, str, int]:
        """``(tenant_id, run_id, seq)``."""
        tenant_id, run_id, seq = self.row[:3]
        return tenant_id, run_id, seq

    def keyframe_row(self) -> list[Any]:
        row = list(self.row)
        row[6], row[7] = self.codec.keyframe(*self.key, self.text), None
        return row

    def guard_params(self) -> list[Any]:
        """The delta's base check (see ``_base_is_stored``); a keyframe passes it."""
        tenant_id, run_id, _ = self.key
        base, tail = self.encoded.base_seq, self.encoded.base_tail
        return [base, tenant_id, run_id, base, tail]

    def refusal_details(self) -> list[str]:
        """What the server's refusals say: the save is not newer; its delta's base is gone."""
        _, run_id, seq = self.key
        return [
            f"{run_id} seq {seq} is not newer than the run's",
            f"{run_id} seq {seq}: its base seq {self.encoded.base_seq} is not as this process remembers it",
        ]

    def refused(self, detail: str) -> StaleCheckpointError:
        self.codec.forget(*self.key[:2])
        return StaleCheckpointError(detail)


def _insert_params(state: LoopState, data: bytes, base_seq: int | None, vendor: str) -> list[Any]:
    return [
        state.tenant_id,
        state.run_id,
        state.seq,
        state.phase.value,
        state.trace_id,
        "",
        data,
        base_seq,
        _saved_at(vendor),
    ]


def _saved_at(vendor: str) -> Any:
    """Now, as the database takes it: PostgreSQL's driver takes the datetime itself."""
    now = timezone.now()
    return now if vendor == "postgresql" else connection.ops.adapt_datetimefield_value(now)


def _insert(save: _Save) -> None:
    """Insert the save's delta if its base is stored as remembered, else a keyframe."""
    with connection.cursor() as cursor:
        if save.encoded.base_seq is not None:
            cursor.execute(_guarded_insert_sql(connection.vendor), [*save.row, *save.guard_params()])
            if cursor.rowcount == 1:
                return
            row = save.keyframe_row()  # a memo left by a rolled-back or refused save
        else:
            row = save.row
        cursor.execute(insert_sql(Checkpoint, _CHECKPOINT_COLUMNS), row)


def _saved_or_refused(save: _Save, result: Result) -> None:
    """The check of a sent save: no row, the projection did not move; else whether it saved.

    Moved but not saved: the delta's base is not stored as remembered (a memo left by a
    rolled-back save), so the checkpoint goes in as a keyframe.
    """
    if not result.rows:
        _refused_or_insert(save)
    elif not result.rows[0][0]:
        with connection.cursor() as cursor:
            cursor.execute(insert_sql(Checkpoint, _CHECKPOINT_COLUMNS), save.keyframe_row())


def _refused_or_insert(save: _Save) -> None:
    """The projection moved nothing: refuse if stale, else (no ``Run`` row) insert if newer."""
    tenant_id, run_id, seq = save.key
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
            _insert(save)
    except IntegrityError as exc:  # a concurrent writer inserted this seq first
        raise save.refused(f"{run_id} seq {seq}") from exc


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


def _project(state: LoopState) -> int:
    """Move the Run row to this checkpoint if it is newer; 0 if stale or there is no row."""
    with connection.cursor() as cursor:
        cursor.execute(_project_sql(connection.vendor), _project_params(state))
        return int(cursor.rowcount)


@functools.cache
def _save_sql() -> str:
    """PostgreSQL: the projection's UPDATE and, only if it moved the row, the insert.

    It answers one row if the projection moved, saying whether the insert ran: a delta
    whose base check fails is not inserted, and the check stores it as a keyframe.
    """
    return f"{_save_ctes()} SELECT EXISTS (SELECT 1 FROM saved) FROM moved"


@functools.cache
def _refusing_save_sql() -> str:
    """:func:`_save_sql`, refusing on the server (``keelgate_refuse``) instead of answering.

    Not moved: a newer checkpoint is saved. Moved but not inserted: the delta's base is
    not the row this process remembers. Either is ``stale_checkpoint``, and the rest of
    the message, its commit included, is skipped.
    """
    refuse = "keelgate_refuse('stale_checkpoint', %s)"
    return (
        f"{_save_ctes()} SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM moved) THEN {refuse}"
        f" WHEN NOT EXISTS (SELECT 1 FROM saved) THEN {refuse} ELSE 1 END"
    )


def _save_ctes() -> str:
    """``moved``: the projection's UPDATE, if newer; ``saved``: the insert, only then, and
    only if a delta's base check passes."""
    qn = connection.ops.quote_name
    columns = ", ".join(map(qn, _CHECKPOINT_COLUMNS))
    values = ", ".join(["%s"] * len(_CHECKPOINT_COLUMNS))
    return (
        f"WITH moved AS ({_project_sql('postgresql')} RETURNING 1),"
        f" saved AS (INSERT INTO {qn(Checkpoint._meta.db_table)} ({columns}) SELECT {values} FROM moved"
        f" WHERE %s::integer IS NULL OR {_base_is_stored('postgresql')} RETURNING 1)"
    )


@functools.cache
def _guarded_insert_sql(vendor: str) -> str:
    """A delta's insert, only if its base check passes (SQLite: no ``Run`` row, or moved already)."""
    qn = connection.ops.quote_name
    columns = ", ".join(map(qn, _CHECKPOINT_COLUMNS))
    values = ", ".join(["%s"] * len(_CHECKPOINT_COLUMNS))
    return (
        f"INSERT INTO {qn(Checkpoint._meta.db_table)} ({columns}) SELECT {values}"
        f" WHERE %s IS NOT NULL AND {_base_is_stored(vendor)}"
    )


def _base_is_stored(vendor: str) -> str:
    """The delta's base row is stored and ends with its Adler-32 (the checksum of the base's text).

    Parameters: tenant id, run id, base seq, base tail. One probe of the unique index.
    """
    qn = connection.ops.quote_name
    data = qn("data")
    tail = (
        f"substring({data} from octet_length({data}) - 3)"
        if vendor == "postgresql"
        else f"substr({data}, -4)"
    )
    return (
        f"EXISTS (SELECT 1 FROM {qn(Checkpoint._meta.db_table)} WHERE {qn('tenant_id')} = %s"
        f" AND {qn('run_id')} = %s AND {qn('seq')} = %s AND {tail} = %s)"
    )


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
        an error, so no savepoint is needed and a grouped transaction stays usable. On
        PostgreSQL the grouped transaction commits in the claim's own message: the gateway
        makes a won claim durable before the tool runs anyway, and a lost one wrote
        nothing that the next flush would not commit as well.
        """
        _aware(now)
        expires = now + timedelta(seconds=lease_seconds)
        group = self.commit_group
        stamp = connection.ops.adapt_datetimefield_value
        params = (
            tenant_id,
            key,
            KeyStatus.IN_FLIGHT.value,
            owner,
            run_id,
            action_id,
            stamp(now),
            stamp(expires),
        )
        with group.write():
            inserted = group.query(insert_sql(KeyRow, _KEY_COLUMNS, _CLAIM_TAIL), params, commit=True).rows
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
        row = self._get(tenant_id, key)
        assert row is not None  # the conflict was on this key, and keys are never deleted
        return ClaimStatus(row.status.value), row

    def complete(
        self, tenant_id: str, key: str, *, owner: str, outcome: str, now: datetime
    ) -> IdempotencyRecord:
        """Store the outcome if ``owner`` still holds the key in flight."""
        _aware(now)
        stamp = connection.ops.adapt_datetimefield_value
        group = self.commit_group
        with group.write():
            rows = group.query(
                _update_key_sql("owner"),
                [
                    KeyStatus.COMPLETED.value,
                    outcome,
                    stamp(now),
                    None,
                    tenant_id,
                    key,
                    KeyStatus.IN_FLIGHT.value,
                    owner,
                ],
            ).rows
        if len(rows) != 1:
            raise KeyNotOwnedError(key)
        return _record(rows[0])

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
        stamp = connection.ops.adapt_datetimefield_value
        group = self.commit_group
        with group.write():
            rows = group.query(
                _update_key_sql(None),
                [status.value, outcome, stamp(now), by, tenant_id, key, KeyStatus.IN_FLIGHT.value],
            ).rows
        if len(rows) != 1:
            raise KeyNotOwnedError(key)
        return _record(rows[0])

    def get(self, tenant_id: str, key: str) -> IdempotencyRecord | None:
        """The record, or None."""
        return self._get(tenant_id, key)

    def _get(self, tenant_id: str, key: str) -> IdempotencyRecord | None:
        rows = self.commit_group.query(_select_key_sql(), [tenant_id, key]).rows
        return _record(rows[0]) if rows else None


_RECORD_COLUMNS = (
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


@functools.cache
def _select_key_sql() -> str:
    qn = connection.ops.quote_name
    return (
        f"SELECT {', '.join(map(qn, _RECORD_COLUMNS))} FROM {qn(KeyRow._meta.db_table)}"
        f" WHERE {qn('tenant_id')} = %s AND {qn('key')} = %s"
    )


@functools.cache
def _update_key_sql(holder: str | None) -> str:
    """Complete (``holder="owner"``: only the owner's key) or settle an in-flight key, returning it.

    Settling also writes ``settled_by``; completing keeps it (``COALESCE`` with NULL).
    """
    qn = connection.ops.quote_name
    where = f"{qn('tenant_id')} = %s AND {qn('key')} = %s AND {qn('status')} = %s"
    if holder:
        where += f" AND {qn(holder)} = %s"
    return (
        f"UPDATE {qn(KeyRow._meta.db_table)} SET {qn('status')} = %s, {qn('outcome')} = %s,"
        f" {qn('completed_at')} = %s, {qn('settled_by')} = COALESCE(%s, {qn('settled_by')})"
        f" WHERE {where} RETURNING {', '.join(map(qn, _RECORD_COLUMNS))}"
    )


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


def _record(row: tuple[Any, ...]) -> IdempotencyRecord:
    tenant_id, key, status, owner, run_id, action_id, claimed, expires, completed, outcome, by = row
    return IdempotencyRecord(
        tenant_id=tenant_id,
        key=key,
        status=KeyStatus(status),
        owner=owner,
        run_id=run_id,
        action_id=action_id,
        claimed_at=_datetime(claimed),
        lease_expires_at=_datetime(expires),
        completed_at=None if completed is None else _datetime(completed),
        outcome=outcome,
        settled_by=by,
    )


def _datetime(value: Any) -> datetime:
    """A raw column's time: PostgreSQL gives it aware, SQLite as naive UTC text."""
    at: datetime = datetime.fromisoformat(value) if isinstance(value, str) else value
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)
