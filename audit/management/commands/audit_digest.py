"""``manage.py audit_digest [--tenant T]``: print a signed digest of a chain's head.

Keep the output somewhere the database's writers cannot reach; ``verify_audit
--against FILE`` later proves history up to that head was not rewritten.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from audit.selectors import audit_digest, audit_tenants
from keelgate.errors import KeelgateError


class Command(BaseCommand):
    help = "Print a signed JSON digest of a tenant's audit chain head."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--tenant", help="required when more than one tenant has a chain")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant: str | None = options["tenant"]
        if tenant is None:
            tenants = audit_tenants()
            if not tenants:
                raise CommandError("no tenant has an audit chain")
            if len(tenants) > 1:
                raise CommandError(f"several tenants have a chain ({', '.join(tenants)}); pass --tenant")
            tenant = tenants[0]
        try:
            digest = audit_digest(tenant_id=tenant)
        except KeelgateError as exc:
            raise CommandError(f"{exc.code}: {exc}") from exc
        self.stdout.write(json.dumps(digest, indent=2, sort_keys=True))
