"""An upstream MCP server a tenant registered: how to reach it, its policy, its tools as last listed."""

from __future__ import annotations

from django.db import models

from keelgate.contrib.mcp import UpstreamSpec


class Upstream(models.Model):
    """One upstream of one tenant; its tools are offered as ``<name>__<tool>``."""

    tenant_id = models.CharField(max_length=63)
    name = models.CharField(max_length=63)
    command = models.TextField(blank=True, help_text="a command that starts the server on stdio")
    url = models.URLField(max_length=2000, blank=True, help_text="a Streamable HTTP endpoint")
    policy = models.JSONField(default=dict, blank=True, help_text="the policy (docs/mcp.md), validated")
    tools = models.JSONField(default=list, blank=True, editable=False)
    """The upstream's tools as last listed (``name``, ``description``, ``inputSchema``...): what a
    worker forwards to without listing them again, and what the inbox can describe."""
    tools_listed_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_by = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant_id", "name"], name="mcp_upstream_unique_per_tenant"),
            models.CheckConstraint(
                condition=(models.Q(command="") & ~models.Q(url=""))
                | (~models.Q(command="") & models.Q(url="")),
                name="mcp_upstream_command_or_url",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tenant_id}/{self.name}"

    def spec(self) -> UpstreamSpec:
        """How the official client reaches it."""
        return UpstreamSpec(name=self.name, command=self.command, url=self.url)


class CallTask(models.Model):
    """An MCP task (the Tasks extension) handed to a client for a call that waits for a person.

    Only the handle is stored: which run is the call, and who asked. The task's status and
    result are read from the run each time (docs/mcp.md, "Tasks"), so the two never drift.
    """

    task_id = models.CharField(max_length=64, primary_key=True)
    """Unguessable (``secrets.token_urlsafe``); found only together with its tenant."""
    tenant_id = models.CharField(max_length=63)
    run_id = models.CharField(max_length=128)
    created_by = models.CharField(max_length=150)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["tenant_id", "run_id"], name="mcp_task_run")]

    def __str__(self) -> str:
        return f"{self.tenant_id}/{self.run_id} (task)"
