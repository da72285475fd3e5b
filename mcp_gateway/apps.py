from django.apps import AppConfig


class McpGatewayConfig(AppConfig):
    """The MCP gateway: upstreams per tenant, and the server at ``/mcp/`` (docs/mcp.md)."""

    name = "mcp_gateway"
    label = "mcp_gateway"
    verbose_name = "MCP gateway"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from mcp_gateway.agents import AGENT_PREFIX, mcp_agent
        from runs.agents import register_agent_source

        register_agent_source(AGENT_PREFIX, mcp_agent)
