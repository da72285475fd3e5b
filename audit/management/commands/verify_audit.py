"""``manage.py verify_audit [--tenant T] [--against FILE]``: verify audit chains.

One line per tenant, ``tenant=T events=N head=SEQ ok`` or ``tenant=T BROKEN at seq=S
reason=R``; exits non-zero (naming the first bad event) if any chain is broken, so a
cron job or CI step fails loudly. ``--against`` checks a signed digest exported
earlier by ``audit_digest`` and implies its tenant.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from audit.selectors import audit_tenants, audit_verify
from keelgate.errors import KeelgateError


class Command(BaseCommand):
    help = "Verify the audit chain of one tenant, or of every tenant with a chain."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--tenant", help="verify only this tenant")
        parser.add_argument(
            "--against", metavar="FILE", help="a digest JSON from audit_digest; implies its tenant"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        tenant: str | None = options["tenant"]
        digest: dict[str, Any] | None = None
        if options["against"]:
            digest = _read_digest(Path(options["against"]))
            named = digest.get("tenant_id")
            if not isinstance(named, str):
                raise CommandError("the digest has no tenant_id")
            if tenant is not None and tenant != named:
                raise CommandError(f"--tenant {tenant} differs from the digest's tenant {named}")
            tenant = named
        tenants = [tenant] if tenant is not None else audit_tenants()
        if not tenants:
            self.stdout.write("no audit chains")
            return
        first_bad: str | None = None
        for tenant_id in tenants:
            try:
                report = audit_verify(tenant_id=tenant_id, against=digest)
            except KeelgateError as exc:
                raise CommandError(f"{exc.code}: {exc}") from exc
            if report.ok:
                self.stdout.write(f"tenant={tenant_id} events={report.checked} head={report.head_seq} ok")
                continue
            line = f"tenant={tenant_id} BROKEN at seq={report.first_bad_seq} reason={report.reason}"
            self.stdout.write(line)
            first_bad = first_bad or line
        if first_bad is not None:
            raise CommandError(f"audit chain broken: {first_bad}")


def _read_digest(path: Path) -> dict[str, Any]:
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc.strerror}") from exc
    except ValueError as exc:
        raise CommandError(f"{path} is not JSON") from exc
    if not isinstance(loaded, dict):
        raise CommandError(f"{path} is not a digest object")
    return loaded
