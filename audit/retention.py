"""Retiring a tenant's oldest audit events after their retention period, without breaking
what remains provable.

The EU AI Act asks deployers to keep such logs at least six months (Art. 26(6)); data
protection asks not to keep personal data longer than needed. A retirement
(``manage.py keelgate_audit_retire``) does, in this order, and stops at the first step
that fails, having deleted nothing:

1. sequences what is pending and picks the cut: every event numbered below ``before_seq``,
   or older than ``older_than_days`` (the events below the first one that is not: none
   retired is newer than asked). The cut never passes the head, and never a signed
   checkpoint: one is signed over the whole log first, so every retired event stays under
   a signature, in the archive and in the live log's list of checkpoints. Retiring every
   event is allowed: the retirement's own event is written after the cut and kept, so the
   live log still proves every older checkpoint consistent with its newest;
2. writes the archive: an export bundle of the retired range under that checkpoint (with
   the consistency proof from the previous retirement's checkpoint, if any), to a
   temporary file beside ``FILE``, and **verifies the bytes read back from disk** with the
   engine's :func:`~keelgate.audit.verify_bundle`, pinned to the site's key, before moving
   it into place;
3. in one transaction under the tenant's head lock, deletes the retired events, keeps
   every ``TreeNode`` (the ``tlog-tiles`` pruning model: the tree keeps its hashes),
   moves ``ChainHead.retired_below`` to the cut, and appends an ``audit.retired`` event
   naming the range, the archive's file name and SHA-256, and who retired it; then signs
   a checkpoint that covers that event.

What stays provable is :mod:`audit.retired`'s and :mod:`audit.verification`'s to say.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django.db import transaction
from django.utils import timezone

from audit.checkpoints import latest_checkpoint, log_verifier_key, sign_checkpoint
from audit.exports import export_bundle
from audit.models import AuditEvent as EventRow
from audit.models import ChainHead, Checkpoint
from audit.retired import first_kept
from audit.tree import lock_head
from audit.wiring import audit_log, integrate_pending
from keelgate.audit import BundleError, format_at, verify_bundle
from sitekit.errors import EmptyChainError, RetirementRefusedError

__all__ = ["RETIRED", "Archive", "Plan", "Retirement", "audit_retire", "retirement_plan", "write_archive"]

RETIRED = "audit.retired"
"""The kind of the event a retirement appends (``audit.kinds``)."""

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Plan:
    """What a retirement will retire: events ``from_seq..to_seq`` of a log of ``head``."""

    tenant_id: str
    from_seq: int
    """The first event the live log keeps now: the first to retire."""
    to_seq: int
    """The last event to retire: the live log will start at ``to_seq + 1``."""
    head: int
    older_than_days: int | None = None

    @property
    def count(self) -> int:
        """How many events it retires."""
        return self.to_seq - self.from_seq + 1


@dataclass(frozen=True)
class Archive:
    """An archive written and verified: ``path`` holds the plan's events under the signed
    checkpoint of ``checkpoint_size``; ``sha256`` is the file's bytes' hash."""

    path: Path
    sha256: str
    checkpoint_size: int
    size_bytes: int


@dataclass(frozen=True)
class Retirement:
    """A retirement done: the plan, its archive, and the event that records it."""

    plan: Plan
    archive: Archive
    event_seq: int


def retirement_plan(
    tenant_id: str,
    *,
    before_seq: int | None = None,
    older_than_days: int | None = None,
    now: datetime | None = None,
) -> Plan | None:
    """The events a retirement would retire (exactly one of ``before_seq``, the first event
    to keep, and ``older_than_days``), what is pending sequenced first; None when that is
    nothing (already retired, or none old enough).

    Raises :class:`EmptyChainError` for a tenant without events and
    :class:`RetirementRefusedError` for a cut past the head or a period that is not one.
    """
    if (before_seq is None) == (older_than_days is None):
        raise RetirementRefusedError("name the cut: a first event to keep, or a number of days")
    integrate_pending([tenant_id], wait=True)
    head = ChainHead.objects.filter(tenant_id=tenant_id).first()
    if head is None or head.seq == 0:
        raise EmptyChainError(tenant_id)
    kept = first_kept(tenant_id)
    if before_seq is not None:
        if before_seq < 1:
            raise RetirementRefusedError(f"--before-seq {before_seq}: event numbers start at 1")
        if before_seq > head.seq + 1:
            raise RetirementRefusedError(
                f"--before-seq {before_seq} is beyond the head: the log has {head.seq} events, "
                f"so at most --before-seq {head.seq + 1} (every event)"
            )
        cut = before_seq
    else:
        days = older_than_days or 0  # given: checked above
        if days < 1:
            raise RetirementRefusedError(f"--older-than-days {days}: a period is at least 1 day")
        threshold = format_at((now or timezone.now()) - timedelta(days=days))
        newer = (
            EventRow.objects.filter(tenant_id=tenant_id, seq__gte=kept, seq__lte=head.seq, at__gte=threshold)
            .order_by("seq")
            .values_list("seq", flat=True)
            .first()
        )
        cut = head.seq + 1 if newer is None else int(newer)
    if cut <= kept:
        return None
    return Plan(tenant_id, kept, cut - 1, head.seq, older_than_days)


def check_archive_path(path: Path, *, force: bool) -> None:
    """Refuse, before anything is done, an archive path that exists (unless ``force``), is a
    folder, or whose folder does not exist."""
    if path.is_dir():
        raise RetirementRefusedError(f"the archive {path} is a folder: name a file")
    if path.exists() and not force:
        raise RetirementRefusedError(f"the archive {path} exists: name another file, or add --force")
    if not path.parent.is_dir():
        raise RetirementRefusedError(f"the archive's folder {path.parent} does not exist")


def _encode(bundle: dict[str, Any]) -> bytes:
    """The archive's bytes, as ``audit_export`` writes a bundle."""
    return json.dumps(bundle, ensure_ascii=False).encode("utf-8")


def _cover(tenant_id: str, to_seq: int) -> Checkpoint:
    """A signed checkpoint covering ``to_seq``: signed now under the head lock, waited for, if
    the newest does not."""
    with transaction.atomic():
        lock_head(tenant_id, wait=True)
        sign_checkpoint(tenant_id)  # finds the lock this transaction holds
    checkpoint = latest_checkpoint(tenant_id)
    if checkpoint is None or checkpoint.size < to_seq:  # cannot be: signed from a head >= to_seq
        raise RetirementRefusedError(f"no signed checkpoint covers event {to_seq}")
    return checkpoint


def _previous_checkpoint(tenant_id: str) -> Checkpoint | None:
    """The checkpoint the newest earlier retirement's archive was proven under, if any."""
    found = EventRow.objects.filter(tenant_id=tenant_id, kind=RETIRED).order_by("-seq").first()
    if found is None:
        return None
    try:
        size = json.loads(found.body).get("checkpoint_size")
    except (ValueError, AttributeError):  # a body edited by hand: verify_audit names it
        return None
    return (
        Checkpoint.objects.filter(tenant_id=tenant_id, size=size).first() if isinstance(size, int) else None
    )


def write_archive(plan: Plan, path: Path, *, force: bool = False, progress: Progress = print) -> Archive:
    """Write the plan's events to ``path`` as a bundle, verified from disk before it is put there.

    The bundle is written to a temporary file in ``path``'s folder and synced; its bytes,
    read back, must verify with the engine alone (the site's verifier key pinned; the
    previous retirement's checkpoint, if any, shown to be a prefix) and hold exactly the
    plan's events; only then is it moved to ``path`` (never over an existing file unless
    ``force``). Raises :class:`RetirementRefusedError` if any of that fails, leaving no file.
    """
    check_archive_path(path, force=force)
    checkpoint = _cover(plan.tenant_id, plan.to_seq)
    previous = _previous_checkpoint(plan.tenant_id)
    progress(
        f"archiving events {plan.from_seq}..{plan.to_seq} under the checkpoint of size {checkpoint.size}"
    )
    bundle = export_bundle(
        plan.tenant_id,
        from_seq=plan.from_seq,
        to_seq=plan.to_seq,
        previous_sizes=[] if previous is None else [previous.size],
    )
    temporary = path.with_name(f".{path.name}.{os.getpid()}.part")
    try:
        _write_synced(temporary, _encode(bundle))
        data = temporary.read_bytes()
        report = verify_bundle(
            data, vkey=log_verifier_key(plan.tenant_id), previous=None if previous is None else previous.note
        )
        if (report.tenant_id, report.from_seq, report.to_seq) != (plan.tenant_id, plan.from_seq, plan.to_seq):
            raise RetirementRefusedError(
                f"the archive holds {report.tenant_id}'s events {report.from_seq}..{report.to_seq}, "
                f"not {plan.from_seq}..{plan.to_seq}"
            )
        if not Checkpoint.objects.filter(tenant_id=plan.tenant_id, size=report.size).exists():
            raise RetirementRefusedError(
                f"the archive's checkpoint of size {report.size} is not one the log signed"
            )
        progress(f"verified {temporary.name}: {report.events} events in the checkpoint of size {report.size}")
        _place(temporary, path, force=force)
    except BundleError as exc:
        raise RetirementRefusedError(f"the archive does not verify: {exc} [{exc.reason}]") from exc
    except OSError as exc:
        raise RetirementRefusedError(f"the archive could not be written: {exc.strerror or exc}") from exc
    finally:
        temporary.unlink(missing_ok=True)
    return Archive(path, hashlib.sha256(data).hexdigest(), report.size, len(data))


def _write_synced(path: Path, data: bytes) -> None:
    with path.open("xb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())


def _place(temporary: Path, path: Path, *, force: bool) -> None:
    """Move the verified archive to ``path``: over an existing file only with ``force``; if
    the move cannot be made durable, the archive is taken away again."""
    if force:
        os.replace(temporary, path)
    else:
        try:
            os.link(temporary, path)  # fails if path appeared meanwhile: never overwritten
        except FileExistsError as exc:
            raise RetirementRefusedError(
                f"the archive {path} exists: name another file, or add --force"
            ) from exc
    try:
        folder = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)
    except OSError:
        path.unlink(missing_ok=True)
        raise


def retire(plan: Plan, archive: Archive, *, actor: str) -> int:
    """Delete the plan's events, move the cut, and record it: one transaction under the
    tenant's head lock; the ``audit.retired`` event's number.

    Refuses (rolling back) if another retirement moved the cut since the plan, or if the
    rows deleted are not exactly the plan's (run ``verify_audit``).
    """
    with transaction.atomic():
        head = lock_head(plan.tenant_id, wait=True)
        now = (head.retired_below, head.seq) if head is not None else (0, 0)
        if now[0] != plan.from_seq or now[1] < plan.to_seq:
            raise RetirementRefusedError(
                f"the log changed since it was planned (it keeps events from {now[0]}, has {now[1]}):"
                " run it again"
            )
        rows = EventRow.objects.filter(tenant_id=plan.tenant_id, seq__gte=plan.from_seq, seq__lte=plan.to_seq)
        deleted, _ = rows.delete()
        if deleted != plan.count:
            raise RetirementRefusedError(
                f"{deleted} events found to delete, not {plan.count}:"
                f" run verify_audit --tenant {plan.tenant_id}"
            )
        ChainHead.objects.filter(tenant_id=plan.tenant_id).update(retired_below=plan.to_seq + 1)
        body: dict[str, Any] = {
            "from_seq": plan.from_seq,
            "to_seq": plan.to_seq,
            "archive_name": archive.path.name,
            "archive_sha256": archive.sha256,
            "checkpoint_size": archive.checkpoint_size,
        }
        if plan.older_than_days is not None:
            body["older_than_days"] = plan.older_than_days
        event = audit_log().append(plan.tenant_id, actor=actor, kind=RETIRED, body=body)
    sign_checkpoint(plan.tenant_id)  # the retirement itself under a signature (the sequencer would, later)
    return event.seq


def audit_retire(
    tenant_id: str,
    *,
    archive: Path,
    actor: str,
    before_seq: int | None = None,
    older_than_days: int | None = None,
    force: bool = False,
    confirm: Callable[[Plan], bool] = lambda plan: True,
    progress: Progress = print,
) -> Retirement | None:
    """Retire the tenant's events below a cut (see the module): plan, confirm, archive and
    verify, then delete and record. None when there is nothing to retire, or ``confirm``
    said no. Raises :class:`RetirementRefusedError` (nothing deleted) or
    :class:`EmptyChainError`."""
    check_archive_path(archive, force=force)
    plan = retirement_plan(tenant_id, before_seq=before_seq, older_than_days=older_than_days)
    if plan is None:
        progress(f"nothing to retire: tenant {tenant_id} keeps events from {first_kept(tenant_id)} on")
        return None
    progress(
        f"tenant {tenant_id}: retiring events {plan.from_seq}..{plan.to_seq} "
        f"({plan.count} of the {plan.head - plan.from_seq + 1} kept)"
    )
    if not confirm(plan):
        progress("not confirmed: nothing was done")
        return None
    written = write_archive(plan, archive, force=force, progress=progress)
    progress(f"wrote {written.path} ({written.size_bytes} bytes, sha256 {written.sha256})")
    progress(f"deleting events {plan.from_seq}..{plan.to_seq}; the tree keeps their hashes")
    seq = retire(plan, written, actor=actor)
    progress(f"retired: the live log starts at event {plan.to_seq + 1}; recorded as event {seq} ({RETIRED})")
    return Retirement(plan, written, seq)
