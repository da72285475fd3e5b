"""A process for the expiry crash tests: one step of an escalating approval over DIR.

Usage::

    python tests/integration/_expiry_child.py DIR STEP [--advance SECONDS]

STEP is ``start`` (run until the order waits), ``warn`` (``warn_expiring``), ``expire``
(``expire``) or ``resume``, with the frozen clock moved ``--advance`` seconds past the
scenario's start. ``KEELGATE_FAILPOINT=window:n`` kills the process (``os._exit(137)``)
there: the Loop reads it itself. Prints one JSON object with the step's answer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import timedelta
from pathlib import Path

_REPO = str(Path(__file__).resolve().parents[2])
if _REPO not in sys.path:
    sys.path.insert(0, _REPO)

from keelgate.gateway import RequireApproval  # noqa: E402  (needs the path above)
from tests.conftest import World, act, answer, buy  # noqa: E402

POLICY = RequireApproval(
    ["place_order"],
    expires_after=timedelta(hours=1),
    on_expiry="escalate",
    escalate_to="admin",
    escalate_after=timedelta(minutes=30),
    warn_before=timedelta(minutes=10),
)


def main() -> int:
    """Do the step; print its answer as JSON."""
    parser = argparse.ArgumentParser()
    parser.add_argument("dir")
    parser.add_argument("step", choices=["start", "warn", "expire", "resume"])
    parser.add_argument("--advance", type=float, default=0.0)
    args = parser.parse_args()
    world = World(Path(args.dir), [act(buy()), answer("done")], policy=POLICY)
    world.clock.advance(args.advance)
    try:
        loop = world.loop()  # no failpoints given: KEELGATE_FAILPOINT arms them
        if args.step in ("start", "resume"):
            result = asyncio.run(world.start(loop))
            answer_ = result.stop_reason.value
        elif args.step == "warn":
            answer_ = loop.warn_expiring("t1", "run-1", "1-1")
        else:
            answer_ = loop.expire("t1", "run-1", "1-1")
        print(json.dumps({"answer": answer_}), flush=True)
        return 0
    finally:
        world.close()


if __name__ == "__main__":
    sys.exit(main())
