from django.apps import AppConfig


class RunsConfig(AppConfig):
    """Runs, their checkpoints and idempotency keys, agents and the worker."""

    name = "runs"
