from django.apps import AppConfig


class AuditConfig(AppConfig):
    """The per-tenant audit hash chain in the database."""

    name = "audit"
