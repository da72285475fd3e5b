"""The console's people (t1: op, viewer, bob, rita; t2: eve) for the in-process MCP gateway tests."""

from tests.site.console.conftest import people  # noqa: F401  (a fixture, used by name)
