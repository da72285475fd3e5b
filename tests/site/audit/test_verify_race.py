"""``verify_log`` while the log grows: what a sequencer numbers or signs between two of its
reads is never taken for a log cut back or an event forged beyond the head.

The log grows at the worst moment, deterministically: in another thread (its own
connection, committed) just before ``verify_log`` asks for checkpoints, or events,
beyond the head it compares them with.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connection, connections

from audit.checkpoints import sign_checkpoint
from audit.models import Checkpoint
from audit.verification import verify_log
from audit.wiring import audit_log, integrate_pending

pytestmark = pytest.mark.django_db(transaction=True)

TENANT = "acme"


def _append(count: int, *, sign: bool) -> None:
    """``count`` events recorded, numbered and (with ``sign``) covered by a new checkpoint."""
    log = audit_log()
    for n in range(count):
        log.record(TENANT, actor="agent", kind="note", body={"n": n})
    integrate_pending([TENANT])
    if sign:
        assert sign_checkpoint(TENANT) is not None


def _elsewhere(count: int, *, sign: bool) -> Callable[[], None]:
    """:func:`_append` in another thread, as a sequencer in another process would, committed."""

    def grow() -> None:
        errors: list[BaseException] = []

        def work() -> None:
            try:
                _append(count, sign=sign)
            except BaseException as exc:  # reported below
                errors.append(exc)
            finally:
                connections.close_all()

        thread = threading.Thread(target=work)
        thread.start()
        thread.join(timeout=60)
        assert not errors, errors

    return grow


@contextmanager
def _just_before(fragment: str, action: Callable[[], None]) -> Iterator[None]:
    """Run ``action`` once, right before the first query whose SQL holds ``fragment``."""
    done: list[bool] = []

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if not done and fragment in sql:
            done.append(True)
            action()
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        yield
    assert done, f"no query held {fragment!r}"


def test_a_checkpoint_signed_while_verifying_is_not_a_log_cut_back():
    """A checkpoint signed of a bigger tree just before verify_log looks for checkpoints
    beyond the head: the head it compares them with has grown as well."""
    _append(5, sign=True)
    with _just_before('"audit_checkpoint"."size" > ', _elsewhere(3, sign=True)):
        report = verify_log(tenant_id=TENANT)
    assert (report.ok, report.reason, report.checked) == (True, None, 5), report
    assert Checkpoint.objects.filter(tenant_id=TENANT).count() == 2
    assert verify_log(tenant_id=TENANT).checked == 8


def test_events_numbered_while_verifying_are_not_forged():
    """Events numbered just before verify_log looks for events beyond the head: the head
    it compares them with has moved with them."""
    _append(5, sign=True)
    with _just_before('"audit_auditevent"."seq" > ', _elsewhere(3, sign=False)):
        report = verify_log(tenant_id=TENANT)
    assert (report.ok, report.reason, report.checked) == (True, None, 5), report
