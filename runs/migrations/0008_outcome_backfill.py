"""The outcome of every run that ended before ``Run.outcome`` existed, from its latest checkpoint.

The rule is today's ``runs.outcomes.run_outcome`` (it reads only the engine's state, which
keeps its shape); a checkpoint that does not decode counts as none (a done run is then
``completed``, as nothing says otherwise). Runs that have not ended keep no outcome.
Reversing it clears nothing: ``0007`` drops the column.
"""

from typing import Any

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps
from pydantic import ValidationError

from keelgate.checkpoint import CheckpointCodec, StoredCheckpoint
from keelgate.errors import CheckpointUnreadableError
from keelgate.loop import LoopState
from runs.outcomes import ENDED, run_outcome


def _latest(checkpoints: Any, tenant_id: str, run_id: str) -> LoopState | None:
    """The run's latest state: its rows from the newest keyframe on (all of them if a
    delta is based below it), decoded; None without one that decodes."""
    rows = checkpoints.filter(tenant_id=tenant_id, run_id=run_id)
    keyframe = rows.filter(base_seq__isnull=True).order_by("-seq").values_list("seq", flat=True).first()
    if keyframe is None:
        return None
    for start in (keyframe, 0):
        stored = [
            StoredCheckpoint(seq, base_seq, None if data is None else bytes(data), state or "")
            for seq, base_seq, data, state in rows.filter(seq__gte=start)
            .order_by("seq")
            .values_list("seq", "base_seq", "data", "state")
        ]
        try:
            text = CheckpointCodec().decode(tenant_id, run_id, stored, latest=False)[-1]
            return LoopState.from_json(text)
        except (CheckpointUnreadableError, ValidationError, ValueError):
            continue
    return None


def backfill(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    alias = schema_editor.connection.alias
    runs = apps.get_model("runs", "Run").objects.using(alias)
    checkpoints = apps.get_model("runs", "Checkpoint").objects.using(alias)
    ended = runs.filter(status__in=[str(s) for s in ENDED], outcome="")
    for pk, tenant_id, run_id, status, stop_reason in ended.values_list(
        "pk", "tenant_id", "run_id", "status", "stop_reason"
    ).iterator(chunk_size=500):
        state = _latest(checkpoints, tenant_id, run_id)
        outcome = run_outcome(status=status, stop_reason=stop_reason, state=state)
        runs.filter(pk=pk).update(outcome=outcome)


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0007_outcome"),
    ]

    operations = [migrations.RunPython(backfill, migrations.RunPython.noop)]
