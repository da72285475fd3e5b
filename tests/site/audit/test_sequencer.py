"""The sequencer's passes (``audit.sequencer``): what is pending is numbered and signed, a
tenant signed within the interval is not asked again until it is due, and heads numbered by
someone else are signed once they are looked for.

On PostgreSQL ``record`` only inserts and the pass numbers the events; on SQLite they are
numbered as they are written and the pass signs them.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connection

from audit import sequencer
from audit.checkpoints import latest_checkpoint
from audit.models import ChainHead, Checkpoint
from audit.sequencer import serve, tick
from audit.verification import verify_log
from audit.wiring import audit_log, integrate_pending
from tests.site._threads import serving

pytestmark = pytest.mark.django_db(transaction=True)

TENANT = "acme"
NOW = timedelta(0)


def _record(count: int) -> None:
    log = audit_log()
    for n in range(count):
        log.record(TENANT, actor="agent", kind="note", body={"n": n})


def _head() -> int:
    return ChainHead.objects.get(tenant_id=TENANT).seq


def _signed_size() -> int:
    checkpoint = latest_checkpoint(TENANT)
    return 0 if checkpoint is None else checkpoint.size


def test_a_pass_numbers_what_is_pending_and_signs_it():
    _record(3)
    sequenced, signed = tick(every=NOW)
    assert (sequenced, signed) == (3 if connection.vendor == "postgresql" else 0, 1)
    assert _head() == _signed_size() == 3
    assert tick(every=NOW) == (0, 0)  # nothing new: nothing numbered, nothing signed
    assert verify_log(tenant_id=TENANT).ok


def test_a_tenant_signed_within_the_interval_is_not_asked_until_it_is_due(monkeypatch: pytest.MonkeyPatch):
    every = timedelta(seconds=0.4)
    signed_at: dict[str, datetime] = {}
    _record(2)
    assert tick(every=every, signed_at=signed_at)[1] == 1 and TENANT in signed_at
    asked: list[str] = []
    real = sequencer.sign_checkpoint

    def counted(tenant_id: str, **kwargs: Any) -> Any:
        asked.append(tenant_id)
        return real(tenant_id, **kwargs)

    monkeypatch.setattr(sequencer, "sign_checkpoint", counted)
    _record(2)
    assert tick(every=every, signed_at=signed_at)[1] == 0
    assert asked == [] and _head() == 4 and _signed_size() == 2  # numbered, not yet signed
    time.sleep(0.45)
    assert tick(every=every, signed_at=signed_at)[1] == 1
    assert asked == [TENANT] and _signed_size() == 4
    assert tick(every=NOW)[1] == 0  # without the record of its signing it asks, and nothing grew


def test_a_head_numbered_by_someone_else_is_signed_when_heads_are_looked_for():
    _record(2)
    integrate_pending([TENANT])  # a reader numbers them (on SQLite their writer did)
    assert tick(every=NOW, unsigned=False) == (0, 0)
    assert not Checkpoint.objects.filter(tenant_id=TENANT).exists()
    assert tick(every=NOW) == (0, 1)
    assert _signed_size() == 2


def test_serve_numbers_and_signs_until_stopped(settings):
    settings.KEELGATE_AUDIT_CHECKPOINT_INTERVAL = 0.05
    with serving(lambda stop: serve(stop, poll=0.01)):
        for batch in range(3):
            _record(5)
            deadline = time.monotonic() + 20
            while _signed_size() < 5 * (batch + 1):
                assert time.monotonic() < deadline, f"batch {batch} was not signed"
                time.sleep(0.02)
    assert _head() == 15 and verify_log(tenant_id=TENANT).ok
