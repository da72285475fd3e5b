"""Terminal demo: a WRITE is approved, its process dies mid-call, and a human settles it.

Run it with `make run`. Every store is a SQLite file under var/demo/, and the crash is
a real one: a child process calls os._exit(137) inside the order tool, after the
brokerage recorded the order but before Keelgate heard back.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from keelgate.audit import SqliteAuditLog, verify
from keelgate.gateway import Gateway, Grants, RequireApproval
from keelgate.loop import Loop, Plan, ProposedAction, StopConditions
from keelgate.sqlite import SqliteStores
from keelgate.testing import Ledger, ScriptedPlanner, trading_tools

HERE = Path(__file__).resolve().parent.parent / "var" / "demo"
TENANT, RUN = "demo", "buy-acme"
SCRIPT = [
    Plan(
        actions=[
            ProposedAction("get_quote", {"symbol": "ACME"}, "check the price first"),
            ProposedAction("place_order", {"symbol": "ACME", "side": "buy", "quantity": 10}),
        ]
    ),
    Plan(final_answer="Bought 10 ACME at 101.5."),
]


def build(ledger_crash: bool = False) -> tuple[Loop, Ledger, SqliteAuditLog]:
    """Every object a process needs, rebuilt over the same files."""
    ledger = Ledger(HERE / "brokerage.sqlite3")
    if ledger_crash:
        ledger.crash = ("after", 1, "exit")
    stores = SqliteStores(HERE / "keelgate.sqlite3")  # one file: the loop groups its commits
    audit = stores.audit
    gateway = Gateway(
        trading_tools(ledger),
        grants=Grants({"paper-trader": ["get_quote", "place_order"]}),
        idempotency=stores.idempotency,
        audit=audit,
        policy=RequireApproval(["place_order"]),
        lease_seconds=3.0,
    )
    loop = Loop(
        planner=ScriptedPlanner(SCRIPT),
        gateway=gateway,
        checkpoints=stores.checkpoints,
        stop=StopConditions(max_iterations=5),
    )
    return loop, ledger, audit


def say(step: str, text: str) -> None:
    """One narrated line."""
    print(f"\033[1m[{step}]\033[0m {text}", flush=True)


async def parent() -> None:
    """The story, told from the operator's side."""
    shutil.rmtree(HERE, ignore_errors=True)
    HERE.mkdir(parents=True)
    loop, ledger, audit = build()
    result = await loop.run(
        goal="buy 10 ACME",
        tenant_id=TENANT,
        agent_id="paper-trader",
        as_of=datetime.now(UTC),
        run_id=RUN,
    )
    order = result.state.action("1-2")
    assert order is not None
    say("plan", f"the agent planned get_quote and place_order; the run stopped: {result.stop_reason}")
    say("inbox", f"place_order {order.arguments} waits for approval (key {order.idempotency_key})")
    loop.approve(TENANT, RUN, "1-2", by="alice", note="within limits")
    say("approve", "alice approved it; a worker process resumes the run...")

    child = subprocess.run([sys.executable, __file__, "--child"], check=False)
    say("crash", f"the worker died inside the order tool (exit code {child.returncode})")
    say("ledger", f"the brokerage recorded {ledger.count()} order(s); Keelgate never heard back")

    loop, ledger, audit = build()
    result = await loop.resume(TENANT, RUN)
    say("resume", f"a new process resumed: stop reason {result.stop_reason} (it will not guess)")
    say("wait", "the dead worker's key lease (3 s) must run out before anyone may settle it...")
    time.sleep(3.2)
    executed = ledger.count(order.idempotency_key) > 0
    await loop.reconcile(TENANT, RUN, "1-2", executed=executed, by="bob", note="checked the brokerage")
    say("reconcile", f"bob asked the brokerage and settled it as executed={executed}")

    result = await loop.resume(TENANT, RUN)
    say("done", f"stop reason {result.stop_reason}; answer: {result.final_answer}")
    say("ledger", f"orders executed for that key: {ledger.count(order.idempotency_key)} (exactly one)")
    report = verify(audit, TENANT)
    say("audit", f"{report.checked} events, chain intact: {report.ok}")
    for event in audit.events(TENANT):
        print(f"    {event.seq:>3}  {event.kind:<18} {event.actor}")


async def child() -> None:
    """The worker that dies: it runs the approved order and is killed mid-call."""
    loop, _, _ = build(ledger_crash=True)
    await loop.resume(TENANT, RUN)


if __name__ == "__main__":
    asyncio.run(child() if "--child" in sys.argv else parent())
