"""``manage.py keelgate_slack``: a tenant's Slack workspace and who its Slack users are.

- ``workspace --tenant T --team T0123 --token-env VAR --secret-env VAR --channel C0123
  [--agent-channel AGENT=C0456 ...]``: register (or change) the workspace; the token and
  signing secret stay in the environment variables named, never in the database.
- ``link --team T0123 --slack-user U0123 --username alice``: an admin links a Slack user
  to a member (a member can do it themself with a code from the console).
- ``unlink --team T0123 --slack-user U0123``.

Each is audited under ``--actor``.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from notifications.models import SlackWorkspace
from notifications.slack.links import LinkRefused, link_by_admin, unlink
from notifications.slack.workspaces import workspace_register
from tenants.models import Tenant


class Command(BaseCommand):
    help = (
        "Register a tenant's Slack workspace (its token and signing secret named by environment variable),"
        " or link and unlink a Slack user to a member."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "what",
            choices=["workspace", "link", "unlink"],
            help="register a workspace, or link or unlink a Slack user",
        )
        parser.add_argument("--tenant", help="workspace: the tenant's slug")
        parser.add_argument("--team", required=True, help="Slack's team id of the workspace (T0123)")
        parser.add_argument("--token-env", help="workspace: the environment variable holding the bot token")
        parser.add_argument(
            "--secret-env", help="workspace: the environment variable holding the signing secret"
        )
        parser.add_argument("--channel", help="workspace: the default channel's id (C0123)")
        parser.add_argument(
            "--agent-channel",
            action="append",
            default=[],
            metavar="AGENT=CHANNEL",
            help="workspace: an agent's own channel (repeat for several)",
        )
        parser.add_argument("--slack-user", help="link, unlink: Slack's id of the user (U0123)")
        parser.add_argument("--username", help="link: the member the Slack user acts as")
        parser.add_argument(
            "--actor", default="manage.py keelgate_slack", help="who does this, as the audit chain names them"
        )

    def _need(self, options: dict[str, Any], *names: str) -> None:
        missing = [f"--{n.replace('_', '-')}" for n in names if not options.get(n)]
        if missing:
            raise CommandError(f"{options['what']} needs {', '.join(missing)}")

    def handle(self, *args: Any, **options: Any) -> None:
        what, actor = options["what"], options["actor"]
        if what == "workspace":
            self._need(options, "tenant", "token_env", "secret_env", "channel")
            tenant = Tenant.objects.filter(slug=options["tenant"]).first()
            if tenant is None:
                raise CommandError(f"no tenant {options['tenant']!r}")
            agents: dict[str, str] = {}
            for pair in options["agent_channel"]:
                agent, sep, channel = pair.partition("=")
                if not sep or not agent or not channel:
                    raise CommandError(f"--agent-channel {pair!r}: write AGENT=CHANNEL")
                agents[agent] = channel
            try:
                registered, created = workspace_register(
                    tenant=tenant,
                    team_id=options["team"],
                    token_env=options["token_env"],
                    secret_env=options["secret_env"],
                    channel=options["channel"],
                    agent_channels=agents,
                    actor=actor,
                )
            except ValueError as exc:
                raise CommandError(str(exc)) from exc
            self.stdout.write(
                f"{'registered' if created else 'changed'} Slack workspace {registered.team_id}"
            )
            return
        found = SlackWorkspace.objects.select_related("tenant").filter(team_id=options["team"]).first()
        if found is None:
            raise CommandError(f"no Slack workspace {options['team']!r}")
        workspace = found
        self._need(options, "slack_user", *(["username"] if what == "link" else []))
        if what == "link":
            try:
                user = link_by_admin(
                    workspace=workspace,
                    slack_user=options["slack_user"],
                    username=options["username"],
                    actor=actor,
                )
            except LinkRefused as exc:
                raise CommandError(str(exc)) from exc
            self.stdout.write(f"linked {options['slack_user']} to {user.get_username()}")
            return
        gone = unlink(workspace=workspace, slack_user=options["slack_user"], actor=actor)
        self.stdout.write("unlinked" if gone else "was not linked")
