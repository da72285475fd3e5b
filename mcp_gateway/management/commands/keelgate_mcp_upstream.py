"""``manage.py keelgate_mcp_upstream --tenant T --name N (--command CMD | --url URL) [--policy FILE]``."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from keelgate.contrib.mcp import IdentityError, PolicyError, load_policy
from mcp_gateway.services import upstream_register
from sitekit.errors import NotFoundError


class Command(BaseCommand):
    help = (
        "Register (or update) a tenant's upstream MCP server; its tools are offered at /mcp/ as"
        " <name>__<tool> under the policy FILE (TOML or JSON; without one every tool is a WRITE"
        " that needs approval)."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--tenant", required=True, help="tenant slug")
        parser.add_argument("--name", required=True, help="the upstream's name, the prefix of its tools")
        how = parser.add_mutually_exclusive_group(required=True)
        how.add_argument("--command", help="a command that starts the server on stdio")
        how.add_argument("--url", help="the server's Streamable HTTP endpoint")
        parser.add_argument("--policy", help="the policy file (docs/mcp.md)")
        parser.add_argument(
            "--actor", default="operator", help="who registers it, as the audit log names them"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            policy = load_policy(options["policy"]).model_dump(mode="json") if options["policy"] else {}
            upstream, created = upstream_register(
                tenant_id=options["tenant"],
                name=options["name"],
                command=options["command"] or "",
                url=options["url"] or "",
                policy=policy,
                actor=options["actor"],
                via="command",
            )
        except (PolicyError, IdentityError) as exc:
            raise CommandError(str(exc)) from exc
        except NotFoundError as exc:
            raise CommandError(f"no tenant {options['tenant']!r}") from exc
        verb = "registered" if created else "updated"
        self.stdout.write(f"upstream {upstream.name} {verb} for {upstream.tenant_id}")
