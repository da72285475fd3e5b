"""Contract suites: one per protocol, run against every implementation of it."""
