"""Time as a dependency, so tests can freeze it and budgets can count active time."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "SystemClock"]


@runtime_checkable
class Clock(Protocol):
    """Wall time for records, a monotonic reading for durations."""

    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        ...

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin; only differences mean anything."""
        ...


class SystemClock:
    """The real clock."""

    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        return datetime.now(UTC)

    def monotonic(self) -> float:
        """``time.monotonic()``."""
        return time.monotonic()
