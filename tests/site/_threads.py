"""Racing callers: several threads released at the same instant, as several people or processes;
and a serving loop run beside the test until it is told to stop."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

from django.db import connections

T = TypeVar("T")


def at_once(calls: Sequence[Callable[[], T]], *, timeout: float = 60) -> list[T | BaseException]:
    """Run each call in a thread of its own, all released by one barrier; in the calls'
    order, what each returned or the exception it raised (judged by the test, never lost
    in its thread). Each thread closes its own database connections when done; a call
    still running after ``timeout`` fails the test."""
    barrier = threading.Barrier(len(calls))
    outcomes: list[T | BaseException] = [RuntimeError("did not finish")] * len(calls)

    def run(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            outcomes[i] = calls[i]()
        except BaseException as exc:
            outcomes[i] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    assert not any(thread.is_alive() for thread in threads), "a call hung"
    return outcomes


def all_returned(outcomes: Sequence[T | BaseException]) -> list[T]:
    """The outcomes of :func:`at_once`, raising the first exception among them."""
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
    return list(outcomes)  # type: ignore[arg-type]


@contextmanager
def serving(loop: Callable[[threading.Event], object], *, timeout: float = 30) -> Iterator[None]:
    """``loop(stop)`` in a thread of its own while the block runs (a command's ``serve``); then
    ``stop`` is set and the thread joined. What it raised fails the test, never lost in its
    thread; the thread closes its own database connections when done."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            loop(stop)
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=timeout)
    assert not thread.is_alive() and not errors, errors
