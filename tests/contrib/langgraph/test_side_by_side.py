"""Side by side under SIGKILL: LangGraph's ToolNode + SqliteSaver against GatedToolNode + KeelgateSaver.

The graph, the tool and the downstream counter are bench 9's (``bench/graph_sigkill.py``);
the counter does not deduplicate, so a repeated execution shows.
"""

from __future__ import annotations

import pytest

from bench import graph_sigkill


@pytest.mark.slow
def test_killed_right_after_the_write_langgraph_repeats_it_and_keelgate_never_does(tmp_path, capsys):
    """SIGKILL just after the order reached the downstream: ToolNode re-runs it, the gated node asks."""
    graph_sigkill.prepare(tmp_path)
    stats = graph_sigkill.measure(tmp_path, 4, kill="after_effect")
    with capsys.disabled():
        print(f"\nafter the effect: {stats}")
    langgraph, keelgate = stats["langgraph"], stats["keelgate"]
    assert langgraph["kills"] == keelgate["kills"] == 4
    assert langgraph["duplicates"] == 4  # every resume placed the order again
    assert keelgate["duplicates"] == 0
    assert keelgate["unknown"] == 4 and keelgate["abandoned"] == 0  # settled as executed from the counter
    assert keelgate["lost"] == 0


@pytest.mark.slow
def test_random_kills_never_duplicate_under_keelgate(tmp_path, capsys):
    """SIGKILL at random moments: Keelgate has no duplicate, loses no order, counts its unknown outcomes."""
    graph_sigkill.prepare(tmp_path)
    stats = graph_sigkill.measure(tmp_path, 12, seed=16)
    with capsys.disabled():
        print(f"\nrandom kills: {stats}")
    keelgate = stats["keelgate"]
    assert keelgate["kills"] == 12
    assert keelgate["duplicates"] == 0
    assert keelgate["lost"] == 0
    assert (
        keelgate["unknown"] - keelgate["abandoned"] <= keelgate["write_before_kill"]
    )  # executed = seen downstream
