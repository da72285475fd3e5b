from django.apps import AppConfig


class AuditConfig(AppConfig):
    """The per-tenant audit hash chain in the database."""

    name = "audit"

    def ready(self) -> None:
        """Write a locked-out login into the user's tenants' chains (django-axes' signal)."""
        from axes.signals import user_locked_out

        from audit.lockouts import on_user_locked_out

        user_locked_out.connect(on_user_locked_out, dispatch_uid="audit.lockouts")
