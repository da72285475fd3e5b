"""The assembly's app: configures tracing in every process that loads the site."""

from __future__ import annotations

from django.apps import AppConfig

from keelgate_site.tracing import configure_tracing


class KeelgateSiteConfig(AppConfig):
    """Installs the OpenTelemetry SDK (``keelgate_site.tracing``) when Django is ready."""

    name = "keelgate_site"

    def ready(self) -> None:
        configure_tracing()
