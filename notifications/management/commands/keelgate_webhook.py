"""``manage.py keelgate_webhook --tenant T``: what an admin does in the console's Webhooks page, from a shell.

``--url URL`` registers a receiver (its secret alone, on the last line); ``--rotate ID``
prints a new secret the same way; ``--disable``, ``--enable``, ``--delete``, ``--test``
take an endpoint's id, ``--redeliver`` a delivery's. Each goes through the same service
as the console and is audited under ``--actor``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from keelgate.errors import KeelgateError
from notifications.models import WebhookDelivery, WebhookEndpoint
from notifications.webhooks.events import EVENT_TYPES
from notifications.webhooks.services import (
    webhook_delivery_redeliver,
    webhook_endpoint_delete,
    webhook_endpoint_enable,
    webhook_endpoint_register,
    webhook_secret_rotate,
    webhook_test_send,
)
from tenants.models import Tenant

SECRET_LINE = "Its signing secret, shown once (store it; Standard Webhooks libraries verify):"


class Command(BaseCommand):
    help = (
        "Manage a tenant's Standard Webhooks receivers: register (--url), rotate the secret, disable,"
        " enable, delete, send a test, redeliver. A new secret is printed once, alone on the last line."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--tenant", required=True, help="tenant slug")
        action = parser.add_mutually_exclusive_group(required=True)
        action.add_argument("--url", help="register a receiver at this http(s) URL")
        action.add_argument("--rotate", type=int, metavar="ID", help="a new signing secret for endpoint ID")
        action.add_argument("--disable", type=int, metavar="ID", help="stop sending to endpoint ID")
        action.add_argument("--enable", type=int, metavar="ID", help="send to endpoint ID again")
        action.add_argument("--delete", type=int, metavar="ID", help="delete endpoint ID and its deliveries")
        action.add_argument("--test", type=int, metavar="ID", help="queue a test message to endpoint ID")
        action.add_argument(
            "--redeliver", type=int, metavar="DELIVERY", help="send finished delivery DELIVERY again"
        )
        parser.add_argument(
            "--events", nargs="+", choices=EVENT_TYPES, default=[], metavar="EVENT", help="default: all"
        )
        parser.add_argument(
            "--include-arguments",
            action="store_true",
            help="send the calls' arguments too (off by default: they may be sensitive)",
        )
        parser.add_argument("--description", default="", help="a label for the receiver")
        parser.add_argument(
            "--grace-seconds",
            type=float,
            help="with --rotate: how long the old secret still signs"
            " (default: KEELGATE_WEBHOOK_SECRET_GRACE_SECONDS)",
        )
        parser.add_argument(
            "--actor",
            default="manage.py keelgate_webhook",
            help="who does this, as the audit chain names them",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"no tenant {options['tenant']!r}")
        actor = options["actor"]
        try:
            if options["url"] is not None:
                self._register(tenant, actor, options)
            elif options["rotate"] is not None:
                grace = options["grace_seconds"]
                endpoint, secret = webhook_secret_rotate(
                    endpoint=self._endpoint(tenant, options["rotate"]),
                    actor=actor,
                    grace=None if grace is None else timedelta(seconds=grace),
                )
                until = endpoint.previous_secret_until
                old = (
                    f"the old one also signs until {until.isoformat()}"
                    if until
                    else "the old one no longer signs"
                )
                self.stdout.write(f"Webhook {endpoint.pk} of {tenant.slug}: new signing secret; {old}.")
                self.stdout.write(SECRET_LINE)
                self.stdout.write(secret)
            elif options["disable"] is not None or options["enable"] is not None:
                enabled = options["enable"] is not None
                pk = options["enable"] if enabled else options["disable"]
                webhook_endpoint_enable(endpoint=self._endpoint(tenant, pk), actor=actor, enabled=enabled)
                self.stdout.write(f"Webhook {pk} of {tenant.slug} {'enabled' if enabled else 'disabled'}.")
            elif options["delete"] is not None:
                webhook_endpoint_delete(endpoint=self._endpoint(tenant, options["delete"]), actor=actor)
                self.stdout.write(f"Webhook {options['delete']} of {tenant.slug} deleted.")
            elif options["test"] is not None:
                delivery = webhook_test_send(endpoint=self._endpoint(tenant, options["test"]), actor=actor)
                self.stdout.write(f"Test message {delivery.webhook_id} queued for the next pass.")
            else:
                delivery = self._delivery(tenant, options["redeliver"])
                webhook_delivery_redeliver(delivery=delivery, actor=actor)
                self.stdout.write(f"{delivery.webhook_id} queued again for the next pass.")
        except KeelgateError as exc:
            raise CommandError(f"{exc.code}: {exc.detail or exc.message}") from exc

    def _register(self, tenant: Tenant, actor: str, options: dict[str, Any]) -> None:
        endpoint, secret = webhook_endpoint_register(
            tenant=tenant,
            url=options["url"],
            actor=actor,
            events=options["events"],
            include_arguments=options["include_arguments"],
            description=options["description"],
        )
        events = ", ".join(endpoint.events) or "all events"
        arguments = "with" if endpoint.include_arguments else "without"
        self.stdout.write(f"Webhook {endpoint.pk} for {tenant.slug}: {events}, {arguments} arguments.")
        self.stdout.write(SECRET_LINE)
        self.stdout.write(secret)

    def _endpoint(self, tenant: Tenant, pk: int) -> WebhookEndpoint:
        endpoint = WebhookEndpoint.objects.select_related("tenant").filter(pk=pk, tenant=tenant).first()
        if endpoint is None:
            raise CommandError(f"no webhook {pk} in {tenant.slug}")
        return endpoint

    def _delivery(self, tenant: Tenant, pk: int) -> WebhookDelivery:
        delivery = (
            WebhookDelivery.objects.select_related("endpoint__tenant")
            .filter(pk=pk, endpoint__tenant=tenant)
            .first()
        )
        if delivery is None:
            raise CommandError(f"no webhook delivery {pk} in {tenant.slug}")
        return delivery
