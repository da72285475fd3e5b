"""``manage.py keelgate_operator USERNAME --tenant T --role R [--password P]``."""

from __future__ import annotations

import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from sitekit.errors import LastAdminError
from tenants.models import Membership, Role, Tenant
from tenants.services import member_add, member_set_role

ACTOR = "manage.py keelgate_operator"
"""The actor of the audit events the command writes (a membership added, a role changed)."""


class Command(BaseCommand):
    help = (
        "Create an operator if missing and set their role in a tenant; each change is an audit event"
        " of the tenant's chain, by 'manage.py keelgate_operator'."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("username", help="the login name; the user is created if missing")
        parser.add_argument("--tenant", required=True, help="tenant slug")
        parser.add_argument(
            "--role", required=True, choices=[r.value for r in Role], help="the role in that tenant"
        )
        parser.add_argument("--password", help="set this password (generated and printed for a new user)")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"no tenant {options['tenant']!r}; create it with keelgate_tenant")
        User = get_user_model()
        try:
            # The model field's own validators (letters, digits and @.+-_, 150 at most), as
            # the admin's forms apply them: a username is never markup or a blank.
            username = User._meta.get_field("username").clean(options["username"], None)
        except ValidationError as exc:
            raise CommandError(f"invalid username: {' '.join(exc.messages)}") from exc
        user, created = User.objects.get_or_create(username=username)
        password = options["password"]
        if created and not password:
            password = secrets.token_urlsafe(12)
        if password:
            user.set_password(password)
            user.save()
        try:
            if Membership.objects.filter(user=user, tenant=tenant).exists():
                member_set_role(tenant=tenant, user=user, role=options["role"], by=ACTOR)
            else:
                member_add(tenant=tenant, username=user.username, role=options["role"], by=ACTOR)
        except LastAdminError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(f"operator {user.username} is {options['role']} in {tenant.slug}")
        if created and not options["password"]:
            self.stdout.write(f"password: {password}")
