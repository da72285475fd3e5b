"""A worker process for the crash tests: build the scenario over DIR and run_or_resume once.

Usage::

    python tests/integration/_crash_child.py DIR [--approval] [--ready FILE --go FILE]

``KEELGATE_FAILPOINT=window:n`` kills the process (``os._exit(137)``) at that window; the
Loop reads it itself, since no failpoints are passed. ``KEELGATE_TEST_TOOL_CRASH=before:n``
or ``after:n`` kills it inside its n-th place_order call, before or after the ledger
row commits. ``--approval`` adds the policy that every place_order needs a person.
``--ready``/``--go`` make it touch one file once everything is open, then wait for the
other, so two workers can be started together.

On stdout it prints one JSON object: ``{"stop_reason": ..., "goal_reached": ...}`` and
exits 0, or ``{"error": "stale_checkpoint"}`` and exits 3 when another process saved a
newer checkpoint first.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

# Run as a script, the repository root is not on sys.path; the scenario lives under it.
_REPO = str(Path(__file__).resolve().parents[2])
if _REPO not in sys.path:
    sys.path.insert(0, _REPO)

from keelgate.errors import StaleCheckpointError  # noqa: E402  (needs the path above)
from keelgate.gateway import RequireApproval  # noqa: E402
from tests.integration._scenario import (  # noqa: E402
    TOOL_CRASH_ENV,
    make_world,
    open_loop,
)

STALE_EXIT = 3


def _tool_crash() -> tuple[str, int] | None:
    spec = os.environ.get(TOOL_CRASH_ENV, "")
    if not spec:
        return None
    side, _, nth = spec.partition(":")
    if side not in ("before", "after"):
        raise SystemExit(f"{TOOL_CRASH_ENV} must be before:n or after:n, not {spec!r}")
    return side, int(nth or 1)


def _wait(ready: str | None, go: str | None) -> None:
    if ready:
        Path(ready).touch()
    if not go:
        return
    deadline = time.monotonic() + 60
    while not os.path.exists(go):
        if time.monotonic() > deadline:
            raise SystemExit("no go signal")
        time.sleep(0.001)


def main() -> int:
    """Run once; print the outcome as JSON; return the exit code."""
    parser = argparse.ArgumentParser()
    parser.add_argument("dir")
    parser.add_argument("--approval", action="store_true")
    parser.add_argument("--ready")
    parser.add_argument("--go")
    args = parser.parse_args()

    world = make_world(args.dir, policy=RequireApproval(["place_order"]) if args.approval else None)
    try:
        loop = open_loop(world, failpoints_from_env=True)
        crash = _tool_crash()
        if crash is not None:
            assert world.ledger is not None
            world.ledger.crash = (crash[0], crash[1], "exit")  # type: ignore[assignment]
        _wait(args.ready, args.go)
        try:
            result = asyncio.run(world.start(loop))
        except StaleCheckpointError:
            print(json.dumps({"error": "stale_checkpoint"}), flush=True)
            return STALE_EXIT
        print(
            json.dumps({"stop_reason": result.stop_reason.value, "goal_reached": result.goal_reached}),
            flush=True,
        )
        return 0
    finally:
        world.close()


if __name__ == "__main__":
    sys.exit(main())
