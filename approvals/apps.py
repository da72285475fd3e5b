from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    """The inbox: pending approvals and unknown outcomes, and the decisions on them."""

    name = "approvals"

    def ready(self) -> None:
        """Keep the inbox in step with every checkpoint; expire approvals when a worker idles;
        apply standing approval rules when a run stops for its approvals."""
        from approvals.receivers import on_checkpoint_saved, on_run_waiting, on_worker_idle
        from runs.signals import checkpoint_saved, run_waiting, worker_idle

        checkpoint_saved.connect(on_checkpoint_saved, dispatch_uid="approvals.inbox")
        worker_idle.connect(on_worker_idle, dispatch_uid="approvals.expire")
        run_waiting.connect(on_run_waiting, dispatch_uid="approvals.standing")
