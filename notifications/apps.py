from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    """Webhooks and email about what waits for a person, delivered from the audit chain."""

    name = "notifications"
