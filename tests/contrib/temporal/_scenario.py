"""A paper-trading loop over SQLite files in a folder, for Temporal workers in any process."""

from __future__ import annotations

import sys
from pathlib import Path

from keelgate.audit import SqliteAuditLog
from keelgate.checkpoint import SqliteCheckpointStore
from keelgate.gateway import Gateway, Grants
from keelgate.idempotency import SqliteIdempotencyStore
from keelgate.loop import Loop, LoopSpec, Plan, ProposedAction
from keelgate.testing import Ledger, ScriptedPlanner, trading_tools

SCRIPT = [
    Plan(
        actions=[
            ProposedAction("get_quote", {"symbol": "ACME"}),
            ProposedAction("place_order", {"symbol": "ACME", "side": "buy", "quantity": 10}),
        ]
    ),
    Plan(final_answer="bought 10 ACME"),
]


def loop_factory(root: Path):
    """A factory building a fresh loop (new objects, same files) for every attempt."""

    def build(spec: LoopSpec) -> Loop:
        gateway = Gateway(
            trading_tools(Ledger(root / "ledger.sqlite3")),
            grants=Grants({"trader": ["*"]}),
            idempotency=SqliteIdempotencyStore(root / "keys.sqlite3"),
            audit=SqliteAuditLog(root / "audit.sqlite3"),
            lease_seconds=5,
        )
        return Loop(
            planner=ScriptedPlanner(SCRIPT),
            gateway=gateway,
            checkpoints=SqliteCheckpointStore(root / "checkpoints.sqlite3"),
        )

    return build


async def serve(root: str, target: str, task_queue: str) -> None:
    """Run a Temporal worker for the scenario until killed."""
    from temporalio.client import Client

    from keelgate.contrib.temporal import temporal_worker

    client = await Client.connect(target)
    worker = temporal_worker(
        client, task_queue=task_queue, loop_factory=loop_factory(Path(root)), heartbeat_every=0.2
    )
    print("ready", flush=True)
    await worker.run()


if __name__ == "__main__":
    import asyncio

    asyncio.run(serve(*sys.argv[1:4]))
