"""The demo brokerage sets its file up once per process, and again for a new file at the same path."""

from __future__ import annotations

from pathlib import Path

from runs.agents.brokerage import PaperBrokerage


def test_a_file_deleted_and_made_again_is_set_up_again(tmp_path: Path):
    """Building the agent (every decision does) skips the set-up of a known file, not of a new one."""
    path = tmp_path / "brokerage.sqlite3"
    PaperBrokerage(str(path)).place_order("k1", "ACME", "buy", 1)
    PaperBrokerage(str(path))  # known: nothing to set up
    for leftover in tmp_path.iterdir():
        leftover.unlink()
    again = PaperBrokerage(str(path))
    assert again.ledger() == []
    assert again.place_order("k1", "ACME", "buy", 1) == PaperBrokerage(str(path)).entry("k1").result
