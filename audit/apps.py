from django.apps import AppConfig


class AuditConfig(AppConfig):
    """The per-tenant audit hash chain in the database."""

    name = "audit"

    def ready(self) -> None:
        """Write a locked-out login into the user's tenants' chains (django-axes' signal), and
        identity's changes (members, keys, sign-ins) as ``tenants.changes`` hands them over."""
        from axes.signals import user_locked_out

        from audit.identity import on_identity_changed
        from audit.lockouts import on_user_locked_out
        from tenants.changes import identity_changed

        user_locked_out.connect(on_user_locked_out, dispatch_uid="audit.lockouts")
        identity_changed.connect(on_identity_changed, dispatch_uid="audit.identity")
