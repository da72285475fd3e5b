"""Hypothesis-generated sequences of crashes across in-process restarts, then recovery.

Each restart is a fresh set of objects over the same files armed with the next crash;
it runs (settling unknown outcomes from the ledger in between) until it dies or stops.
Whatever the sequence, every WRITE ends with one ledger row, or none and abandoned.
"""

from __future__ import annotations

import asyncio
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from keelgate.errors import CrashFailpoint
from keelgate.loop import WINDOWS, StopReason
from tests.integration._scenario import (
    Crash,
    assert_invariants,
    make_world,
    open_loop,
    reconcile_unknowns,
    recover,
)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("store_layout")]

crashes = st.builds(
    Crash,
    st.sampled_from([*WINDOWS, "tool_before", "tool_after"]),
    st.integers(min_value=1, max_value=3),
)


async def _restarts(root: str, sequence: list[Crash], impatient: bool) -> list[CrashFailpoint]:
    """Apply each crash in its own restart; return the crashes that actually fired.

    ``impatient``: on an unknown outcome, first restart once more without settling it,
    which must stop on the same unknown again without running anything.
    """
    world = make_world(root)
    fired: list[CrashFailpoint] = []
    try:
        for crash in sequence:
            loop = open_loop(world, crash=crash)
            for _ in range(8):
                try:
                    result = await world.start(loop)
                except CrashFailpoint as died:
                    fired.append(died)
                    break
                if result.stop_reason is not StopReason.OUTCOME_UNKNOWN:
                    break
                assert world.ledger is not None
                if impatient:
                    # Another process over the same files, while this one stays open.
                    rows = world.ledger.count()
                    other = make_world(root)
                    try:
                        again = await other.start(open_loop(other))
                    finally:
                        other.close()
                    assert again.stop_reason is StopReason.OUTCOME_UNKNOWN
                    assert world.ledger.count() == rows
                await reconcile_unknowns(loop, world.ledger, result.state)
            else:
                raise AssertionError(f"restart armed with {crash} did not settle")
        result = await recover(world)
        assert result.goal_reached
        statuses = assert_invariants(world)
    finally:
        world.close()
    # A death before the ledger commit leaves exactly that order unknown with no row,
    # which the tester abandons; nothing else ever abandons an order.
    before = sum(1 for died in fired if died.window == "tool_before_commit")
    assert statuses.count("abandoned") == before
    return fired


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(sequence=st.lists(crashes, min_size=1, max_size=3), impatient=st.booleans())
def test_any_sequence_of_up_to_three_crashes_leaves_every_write_once_or_abandoned(
    sequence: list[Crash], impatient: bool
) -> None:
    """Up to three crashes across restarts, then recovery: each order ran once, or never and abandoned."""
    # Function-scoped fixtures are shared by every example, so each gets its own folder.
    with tempfile.TemporaryDirectory(prefix="keelgate-crash-") as root:
        fired = asyncio.run(_restarts(root, sequence, impatient))
    assert fired, f"the first crash of {[str(c) for c in sequence]} never fired"
