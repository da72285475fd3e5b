"""The optional integrations the core reaches without importing them.

An extra (``keelgate[openai]``, ``keelgate[langgraph]``) says what it provides to the
core as an entry point of the group :data:`GROUP`, declared in ``pyproject.toml``; the
core finds it by name when it is first needed (``LLMPlanner()``, ``default_checkpointer()``).
So the dependency points from ``keelgate.contrib`` to the core and never back: no module
of the core imports a contrib module (``tests/unit/test_core_imports.py``), and an
integration outside this package could provide the same names the same way.
"""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any

__all__ = ["GROUP", "load_extra"]

GROUP = "keelgate.extras"
"""The entry-point group of what the extras provide to the core."""


def load_extra(name: str) -> Any | None:
    """What an installed extra provides under ``name``, or None.

    None when no installed distribution declares ``name`` in :data:`GROUP`, or when it
    cannot be imported (the extra's own dependency, ``openai`` say, is absent).
    """
    for entry_point in entry_points(group=GROUP, name=name):
        try:
            return entry_point.load()
        except ImportError:
            return None
    return None
