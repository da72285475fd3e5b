"""``manage.py keelgate_webhook --tenant T --url URL``: register a receiver; its secret alone, last."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from notifications.webhooks.events import EVENT_TYPES
from notifications.webhooks.services import webhook_endpoint_register
from sitekit.errors import WebhookUrlRefusedError
from tenants.models import Tenant


class Command(BaseCommand):
    help = (
        "Register a Standard Webhooks receiver for a tenant. "
        "The signing secret is printed once, alone on the last line."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--tenant", required=True, help="tenant slug")
        parser.add_argument("--url", required=True, help="the receiver's http(s) URL")
        parser.add_argument(
            "--events", nargs="+", choices=EVENT_TYPES, default=[], metavar="EVENT", help="default: all"
        )
        parser.add_argument(
            "--include-arguments",
            action="store_true",
            help="send the calls' arguments too (off by default: they may be sensitive)",
        )
        parser.add_argument("--description", default="", help="a label for the receiver")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"no tenant {options['tenant']!r}")
        try:
            endpoint, secret = webhook_endpoint_register(
                tenant=tenant,
                url=options["url"],
                actor="manage.py keelgate_webhook",
                events=options["events"],
                include_arguments=options["include_arguments"],
                description=options["description"],
            )
        except WebhookUrlRefusedError as exc:
            raise CommandError(f"{exc.code}: {exc.detail or exc.message}") from exc
        events = ", ".join(endpoint.events) or "all events"
        arguments = "with" if endpoint.include_arguments else "without"
        self.stdout.write(f"Webhook {endpoint.pk} for {tenant.slug}: {events}, {arguments} arguments.")
        self.stdout.write("Its signing secret, shown once (store it; Standard Webhooks libraries verify):")
        self.stdout.write(secret)
