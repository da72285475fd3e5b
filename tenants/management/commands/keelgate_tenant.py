"""``manage.py keelgate_tenant NAME``: create a tenant if missing."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from tenants.models import Tenant


class Command(BaseCommand):
    help = "Create a tenant (slug NAME) if it does not exist."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("name", help="the tenant's slug")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = Tenant(slug=options["name"], name=options["name"])
        try:
            tenant.full_clean(validate_unique=False)
        except ValidationError as exc:
            raise CommandError(f"invalid tenant name: {'; '.join(exc.messages)}") from exc
        _, created = Tenant.objects.get_or_create(slug=tenant.slug, defaults={"name": tenant.name})
        self.stdout.write(f"tenant {tenant.slug} {'created' if created else 'exists'}")
