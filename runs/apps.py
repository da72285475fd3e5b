from django.apps import AppConfig


class RunsConfig(AppConfig):
    """Runs, their checkpoints and idempotency keys, agents, and the engine adapter."""

    name = "runs"

    def ready(self) -> None:
        """Hand queued runs to Temporal when the site is configured to (``KEELGATE_RUNNER``)."""
        from runs.engine.temporal import dispatch
        from runs.signals import run_queued

        run_queued.connect(dispatch, dispatch_uid="runs.temporal")
