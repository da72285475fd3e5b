"""Named crash windows, so tests can kill the loop exactly where it hurts."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Literal

from keelgate.errors import CrashFailpoint

__all__ = ["EXPIRY_WINDOWS", "WINDOWS", "Failpoints"]

WINDOWS: tuple[str, ...] = (
    "after_plan",
    "before_action",
    "after_gateway_call",
    "after_action_checkpoint",
    "after_observe",
    "after_verify",
)

EXPIRY_WINDOWS: tuple[str, ...] = (
    "after_warning_audit",
    "after_escalation_audit",
)
"""Where an expiry can die: its audit event appended, the checkpoint that records it not
yet saved. Reached by the decisions (``warn_expiring``, ``expire``) and by a resume that
escalates, never by a plain run, so they are kept apart from :data:`WINDOWS`."""

ENV_VAR = "KEELGATE_FAILPOINT"


class Failpoints:
    """Crash at the n-th time a window is reached.

    ``mode="raise"`` raises :class:`~keelgate.errors.CrashFailpoint` (a BaseException,
    so no ``except Exception`` swallows it) for in-process restarts; ``mode="exit"``
    calls ``os._exit(137)``, so nothing is flushed, as a real kill would.
    """

    def __init__(
        self,
        crash_at: Mapping[str, int] | None = None,
        *,
        mode: Literal["raise", "exit"] = "raise",
    ) -> None:
        unknown = set(crash_at or {}) - set(WINDOWS) - set(EXPIRY_WINDOWS)
        if unknown:
            raise ValueError(f"unknown failpoint windows: {sorted(unknown)}")
        self._crash_at = dict(crash_at or {})
        self._mode = mode
        self.counts: dict[str, int] = dict.fromkeys(WINDOWS, 0)

    @classmethod
    def from_env(cls) -> Failpoints | None:
        """``KEELGATE_FAILPOINT=window:n`` crashes the process (exit mode); unset gives None."""
        spec = os.environ.get(ENV_VAR, "")
        if not spec:
            return None
        window, _, occurrence = spec.partition(":")
        return cls({window: int(occurrence or 1)}, mode="exit")

    def hit(self, window: str) -> None:
        """Count one arrival at ``window`` and crash if this is the chosen occurrence."""
        self.counts[window] = self.counts.get(window, 0) + 1
        if self._crash_at.get(window) == self.counts[window]:
            if self._mode == "exit":
                os._exit(137)
            raise CrashFailpoint(window, self.counts[window])
