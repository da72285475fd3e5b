"""``manage.py create_api_key --tenant T --user U [--name N]``: the key alone on the last line."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from sitekit.errors import NotAMemberError
from tenants.api_keys import api_key_create
from tenants.models import Tenant


class Command(BaseCommand):
    help = "Create an API key for a user of a tenant. The key is printed once, alone on the last line."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--tenant", required=True, help="tenant slug")
        parser.add_argument("--user", required=True, help="username; must belong to the tenant")
        parser.add_argument("--name", default="", help="a label for the key (e.g. 'ci')")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"no tenant {options['tenant']!r}")
        user = get_user_model().objects.filter(username=options["user"]).first()
        if user is None:
            raise CommandError(f"no user {options['user']!r}")
        try:
            key, secret = api_key_create(
                tenant=tenant, user=user, name=options["name"][:100], by="manage.py create_api_key"
            )
        except NotAMemberError as exc:
            raise CommandError(f"{user.username} does not belong to {tenant.slug}") from exc
        self.stdout.write(
            f"API key {key.prefix} for {user.username} in {tenant.slug}; it is shown once, store it now:"
        )
        self.stdout.write(secret)
