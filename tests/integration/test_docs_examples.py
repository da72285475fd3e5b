"""The code the documentation shows runs, and says what the documentation says it does.

The README's engine example and the tutorial's agent (``docs/examples/first_agent.py``,
included whole in ``docs/tutorial.md``) each run as a subprocess in a scratch folder.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _run(argv: list[str], cwd: Path) -> str:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def readme_example() -> str:
    """The README's first Python block: its engine example."""
    match = re.search(r"```python\n(.*?)```", (REPO / "README.md").read_text(), re.DOTALL)
    assert match, "README.md has no python example"
    return match.group(1)


def test_the_readme_example_runs_its_write_once_after_approval(tmp_path: Path) -> None:
    """The README's example stops for approval, then runs the approved WRITE exactly once."""
    (tmp_path / "example.py").write_text(readme_example())
    out = _run([sys.executable, "example.py"], tmp_path)
    assert out.splitlines()[0] == "approval_pending"
    assert out.splitlines()[1].startswith("Refunded 25.00 on order A-17. ['kg_")


@pytest.mark.slow
def test_the_tutorial_agent_survives_a_killed_worker_with_one_refund(tmp_path: Path) -> None:
    """The tutorial's worker is SIGKILLed mid-call; the run stops on an unknown outcome, a
    person settles it, and the downstream holds exactly one refund."""
    out = _run([sys.executable, str(REPO / "docs" / "examples" / "first_agent.py")], tmp_path)
    assert out.splitlines() == [
        "run stopped: approval_pending",
        "alice approved the refund",
        "worker killed after the provider recorded the refund",
        "resumed: outcome_unknown",
        "bob settled it as executed: True",
        "finished: goal_reached - Refunded 25.00 on order A-17.",
        "refunds made: 1; audit chain of 10 events intact: True",
    ]
