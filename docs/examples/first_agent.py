"""The tutorial's agent: a WRITE behind approval, a worker killed mid-call, a person reconciles.

Run it from the repository's root: ``python docs/examples/first_agent.py``. It keeps its
files in ``./first-agent/`` and prints what happens at each step.
``tests/integration/test_docs_examples.py`` runs it.
"""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from keelgate.audit import verify
from keelgate.gateway import Gateway, Grants, RequireApproval, SideEffect, Tool, ToolCall
from keelgate.loop import Loop, Plan, ProposedAction
from keelgate.sqlite import SqliteStores
from keelgate.testing import ScriptedPlanner

HOME = Path("first-agent")
TENANT, RUN, AGENT = "acme", "refund-a17", "support-bot"


# --8<-- [start:tool]
# 1. The downstream system: the payment provider's own record, outside Keelgate.
def payments() -> sqlite3.Connection:
    db = sqlite3.connect(HOME / "payments.sqlite3", isolation_level=None)
    db.execute("CREATE TABLE IF NOT EXISTS refunds (key TEXT, order_id TEXT, amount REAL)")
    return db


# 2. The tool: a WRITE, with a schema for its arguments.
class Refund(BaseModel):
    order_id: str = Field(min_length=1)
    amount: float = Field(gt=0, le=500)


def refund(args: Refund, call: ToolCall) -> dict[str, Any]:
    payments().execute(
        "INSERT INTO refunds VALUES (?, ?, ?)", (call.idempotency_key, args.order_id, args.amount)
    )
    time.sleep(30)  # the provider is slow to answer: the worker is killed right here
    return {"refunded": args.amount}


# --8<-- [end:tool]


# --8<-- [start:agent]
# 3. The agent: a planner (a script standing in for a model), the gateway, the loop.
def build() -> Loop:
    stores = SqliteStores(HOME / "keelgate.sqlite3")  # checkpoints, keys, audit: one file
    gateway = Gateway(
        [Tool("refund", SideEffect.WRITE, Refund, refund, "Refund an order.")],
        grants=Grants({AGENT: ["refund"]}),
        idempotency=stores.idempotency,
        audit=stores.audit,
        policy=RequireApproval(["refund"]),  # every refund waits for a person
        lease_seconds=1.0,  # how long a silent worker's call counts as possibly running
    )
    planner = ScriptedPlanner(
        [
            Plan(actions=[ProposedAction("refund", {"order_id": "A-17", "amount": 25.0})]),
            Plan(final_answer="Refunded 25.00 on order A-17."),
        ]
    )
    return Loop(planner=planner, gateway=gateway, checkpoints=stores.checkpoints)


# --8<-- [end:agent]


# --8<-- [start:story]
async def main() -> None:
    shutil.rmtree(HOME, ignore_errors=True)
    HOME.mkdir()
    loop = build()

    # 4. Run it: the refund is planned and saved, then the run stops for approval.
    result = await loop.run(
        goal="refund order A-17", tenant_id=TENANT, agent_id=AGENT, as_of=datetime.now(UTC), run_id=RUN
    )
    print("run stopped:", result.stop_reason)

    # 5. A person approves it.
    loop.approve(TENANT, RUN, "1-1", by="alice", note="customer called")
    print("alice approved the refund")

    # 6. A worker process resumes the run, and is killed inside the tool.
    worker = subprocess.Popen([sys.executable, __file__, "worker"])
    while not payments().execute("SELECT count(*) FROM refunds").fetchone()[0]:
        time.sleep(0.05)
    worker.kill()  # SIGKILL: nothing is flushed, nothing is told
    worker.wait()
    print("worker killed after the provider recorded the refund")

    # 7. Resume: the key is in flight and its owner is gone, so nobody knows. Stop, don't guess.
    loop = build()
    result = await loop.resume(TENANT, RUN)
    print("resumed:", result.stop_reason)

    # 8. Reconcile: a person checks the provider's record by the call's key and settles it.
    time.sleep(1.2)  # the dead worker's lease runs out first
    key = result.state.action("1-1").idempotency_key
    found = payments().execute("SELECT count(*) FROM refunds WHERE key = ?", (key,)).fetchone()[0]
    await loop.reconcile(TENANT, RUN, "1-1", executed=found > 0, by="bob", note="checked the provider")
    print("bob settled it as executed:", found > 0)

    # 9. The run finishes. The refund ran exactly once, and the audit chain says who did what.
    result = await loop.resume(TENANT, RUN)
    print("finished:", result.stop_reason, "-", result.final_answer)
    total = payments().execute("SELECT count(*) FROM refunds").fetchone()[0]
    stores = SqliteStores(HOME / "keelgate.sqlite3")
    report = verify(stores.audit, TENANT)
    print(f"refunds made: {total}; audit chain of {report.checked} events intact: {report.ok}")


# --8<-- [end:story]


# --8<-- [start:worker]
async def worker() -> None:
    await build().resume(TENANT, RUN)


# --8<-- [end:worker]


if __name__ == "__main__":
    asyncio.run(worker() if sys.argv[1:] == ["worker"] else main())
