"""An MCP call as a run of the engine's loop: played once, its key sent, its failures honest."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path

from keelgate.audit import InMemoryAuditLog
from keelgate.checkpoint import InMemoryCheckpointStore
from keelgate.contrib.mcp import CallPlanner, UpstreamSpec, call_goal, upstream_tool
from keelgate.gateway import Gateway, Grants, RequireApproval, SideEffect
from keelgate.idempotency import InMemoryIdempotencyStore
from keelgate.loop import ActionStatus, Loop, StopReason

SERVER = Path(__file__).with_name("upstream_server.py")


def _loop(ledger: Path, *, policy=None, timeout: float | None = 20) -> Loop:
    spec = UpstreamSpec(name="u", command=f"{sys.executable} {SERVER} {ledger}")
    tools = [
        upstream_tool(
            spec,
            name="u__send",
            upstream_name="send",
            side_effect=SideEffect.WRITE,
            idempotency_argument="key",
            timeout=timeout,
        ),
        upstream_tool(
            spec, name="u__crash", upstream_name="crash", side_effect=SideEffect.WRITE, timeout=timeout
        ),
    ]
    gateway = Gateway(
        tools,
        grants=Grants({"mcp:u": ["*"]}),
        idempotency=InMemoryIdempotencyStore(),
        audit=InMemoryAuditLog(),
        policy=policy,
    )
    return Loop(planner=CallPlanner(), gateway=gateway, checkpoints=InMemoryCheckpointStore())


def _sent(ledger: Path) -> list[dict]:
    if not ledger.exists():
        return []
    return [json.loads(line) for line in ledger.read_text().splitlines()]


async def test_a_write_call_runs_once_with_the_gateway_key_in_the_policy_argument(tmp_path):
    """The run plays the goal's call, the upstream gets the action's key as ``key``, and a
    resume of the finished run forwards nothing again."""
    ledger = tmp_path / "ledger"
    loop = _loop(ledger)
    goal = call_goal("u__send", {"to": "ann", "text": "hi"})
    result = await loop.run(goal=goal, tenant_id="t", agent_id="mcp:u", as_of=datetime.now(UTC), run_id="r")
    assert result.stop_reason is StopReason.GOAL_REACHED
    (action,) = result.state.actions
    assert action.status is ActionStatus.DONE
    assert json.loads(action.outcome.output)["structuredContent"]["key"] == action.idempotency_key
    await loop.resume("t", "r")
    assert [e["arguments"]["key"] for e in _sent(ledger)] == [action.idempotency_key]


async def test_a_write_that_needs_approval_waits_and_is_forwarded_only_once_approved(tmp_path):
    """Nothing reaches the upstream before the approval; after it, exactly one execution."""
    ledger = tmp_path / "ledger"
    loop = _loop(ledger, policy=RequireApproval(["u__send"]))
    goal = call_goal("u__send", {"to": "ann", "text": "hi"})
    result = await loop.run(goal=goal, tenant_id="t", agent_id="mcp:u", as_of=datetime.now(UTC), run_id="r")
    assert result.stop_reason is StopReason.APPROVAL_PENDING
    assert _sent(ledger) == []
    loop.approve("t", "r", result.state.actions[0].action_id, by="ann")
    assert (await loop.resume("t", "r")).stop_reason is StopReason.GOAL_REACHED
    assert len(_sent(ledger)) == 1


async def test_an_upstream_that_dies_mid_write_leaves_an_unknown_outcome_never_retried(tmp_path):
    """The process died after it may have acted: unknown, and a resume does not forward it again."""
    ledger = tmp_path / "ledger"
    loop = _loop(ledger)
    goal = call_goal("u__crash", {})
    result = await loop.run(goal=goal, tenant_id="t", agent_id="mcp:u", as_of=datetime.now(UTC), run_id="r")
    assert result.stop_reason is StopReason.OUTCOME_UNKNOWN
    assert (await loop.resume("t", "r")).stop_reason is StopReason.OUTCOME_UNKNOWN
    assert len(_sent(ledger)) == 1


async def test_over_http_the_key_travels_in_the_idempotency_key_header(tmp_path):
    """A WRITE to an upstream reached by URL carries the action's key as ``Idempotency-Key``."""
    import socket
    import subprocess
    import time

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    ledger = tmp_path / "ledger"
    server = subprocess.Popen([sys.executable, str(SERVER), str(ledger), str(port)])
    try:
        spec = UpstreamSpec(name="w", url=f"http://127.0.0.1:{port}/mcp")
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and server.poll() is None
                time.sleep(0.2)
        post = upstream_tool(
            spec, name="w__post", upstream_name="post", side_effect=SideEffect.WRITE, timeout=20
        )
        gateway = Gateway(
            [post],
            grants=Grants({"mcp:w": ["*"]}),
            idempotency=InMemoryIdempotencyStore(),
            audit=InMemoryAuditLog(),
        )
        loop = Loop(planner=CallPlanner(), gateway=gateway, checkpoints=InMemoryCheckpointStore())
        goal = call_goal("w__post", {"text": "note"})
        result = await loop.run(
            goal=goal, tenant_id="t", agent_id="mcp:w", as_of=datetime.now(UTC), run_id="r"
        )
    finally:
        server.terminate()
        server.wait(timeout=10)
    (action,) = result.state.actions
    assert action.status is ActionStatus.DONE
    (execution,) = _sent(ledger)
    assert execution["idempotency_header"] == action.idempotency_key
    assert "key" not in execution["arguments"]
