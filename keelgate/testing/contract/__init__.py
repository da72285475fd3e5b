"""Contract suites: one per protocol, run against every implementation of it."""

__all__: list[str] = []
