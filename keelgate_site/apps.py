"""The assembly's app: configures tracing and database connections in every process that loads the site."""

from __future__ import annotations

from django.apps import AppConfig
from django.db.backends.signals import connection_created

from keelgate_site.tracing import configure_tracing
from sitekit.db import fast_timestamps


class KeelgateSiteConfig(AppConfig):
    """Installs the OpenTelemetry SDK (``keelgate_site.tracing``) when Django is ready, and
    psycopg's C timestamp loader on each new PostgreSQL connection (``sitekit.db``)."""

    name = "keelgate_site"

    def ready(self) -> None:
        configure_tracing()
        connection_created.connect(fast_timestamps, dispatch_uid="keelgate-fast-timestamps")
