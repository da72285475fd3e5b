"""A child process for the saver's crash and fencing tests: one small graph on a KeelgateSaver.

``python -m tests.contrib.langgraph.graph_child <db> <thread> <ledger> <mode>``:

- ``crash-after-writes``: run the graph; die (``os._exit(137)``) right after the first
  task's pending writes commit, before the next checkpoint.
- ``crash-after-put``: die right after the second checkpoint commits.
- ``resume``: resume the thread to its end and print the final total.
- ``owned <lease_seconds>``: take the thread's lease, run with a node that waits for the
  file ``<ledger>.go`` (the parent freezes us meanwhile), then print what the write did.
"""

from __future__ import annotations

import operator
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph

from keelgate.contrib.langgraph import KeelgateSaver
from keelgate.errors import StaleOwnerError


class State(TypedDict):
    total: Annotated[int, operator.add]


def build(ledger: Path, *, wait_for: Path | None = None):  # type: ignore[no-untyped-def]
    def charge(state: State) -> State:
        if wait_for is not None:
            print("waiting", flush=True)
            while not wait_for.exists():
                time.sleep(0.02)
        with ledger.open("a") as f:  # the side effect, counted by the test
            f.write("charge\n")
            f.flush()
            os.fsync(f.fileno())
        return {"total": 10}

    def ship(state: State) -> State:
        return {"total": 1}

    builder = StateGraph(State)
    builder.add_node("charge", charge)
    builder.add_node("ship", ship)
    builder.add_edge(START, "charge")
    builder.add_edge("charge", "ship")
    builder.add_edge("ship", END)
    return builder


def main(argv: list[str]) -> int:
    db, thread, ledger, mode = argv[:4]
    saver = KeelgateSaver.sqlite(db, tenant_id="acme")
    config = {"configurable": {"thread_id": thread}}
    if mode.startswith("crash-"):
        window = "after_put_writes" if mode == "crash-after-writes" else "after_put"

        def crash(at: str, values: Sequence[tuple[str, Any]]) -> None:
            # The charge's own writes (total += 10), or the first checkpoint holding them;
            # not a write of an earlier task that LangGraph's executor committed late.
            if at == window and ("total", 10) in values:
                os._exit(137)

        saver.failpoint = crash
        build(Path(ledger)).compile(checkpointer=saver).invoke({"total": 0}, config, durability="sync")
        return 0
    if mode == "resume":
        graph = build(Path(ledger)).compile(checkpointer=saver)
        out = graph.invoke(None, config, durability="sync")
        print(f"total={out['total']}", flush=True)
        return 0
    if mode == "owned":
        lease = saver.acquire(thread, owner=f"A:{os.getpid()}", lease_seconds=float(argv[4]))
        assert lease is not None
        print(f"epoch={lease.epoch}", flush=True)
        graph = build(Path(ledger), wait_for=Path(ledger + ".go")).compile(checkpointer=saver.owned(lease))
        try:
            graph.invoke({"total": 0}, config, durability="sync")
        except StaleOwnerError as exc:
            print(f"refused={exc.code}", flush=True)
            return 3
        print("wrote", flush=True)
        return 0
    raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
