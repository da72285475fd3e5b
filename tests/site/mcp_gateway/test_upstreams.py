"""Registering upstreams: the command, the admin form, the agent a run of ``mcp:<name>`` gets."""

from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command

from audit.models import AuditEvent
from keelgate.canonical import canonical_sha256
from keelgate.gateway import SideEffect
from mcp_gateway.admin import UpstreamForm
from mcp_gateway.models import Upstream
from runs.agents import load_agent
from sitekit.errors import UnknownAgentError

pytestmark = pytest.mark.django_db

TOOLS = [
    {"name": "lookup", "description": "reads", "inputSchema": {"type": "object"}},
    {"name": "send", "description": "writes", "inputSchema": {"type": "object"}},
]


@pytest.fixture
def tenants():
    from tenants.models import Tenant

    Tenant.objects.create(slug="acme")
    Tenant.objects.create(slug="other")


def test_the_command_registers_then_updates_an_upstream_with_its_policy(tenants, tmp_path, capsys):
    """Once registered, once updated: one row, the new command, the validated policy."""
    policy = tmp_path / "p.toml"
    policy.write_text('[tools.lookup]\nside_effect = "read"\n')
    call_command(
        "keelgate_mcp_upstream", tenant="acme", name="mail", command="mail-mcp --stdio", policy=str(policy)
    )
    call_command("keelgate_mcp_upstream", tenant="acme", name="mail", url="https://mail.example/mcp")
    assert "registered" in capsys.readouterr().out
    (upstream,) = Upstream.objects.all()
    assert (upstream.command, upstream.url, upstream.policy) == ("", "https://mail.example/mcp", {})


def test_each_registration_is_one_audit_event_naming_the_upstream_never_the_commands_arguments(
    tenants, tmp_path
):
    """Registered then changed through the command: two ``mcp.upstream_registered`` events in
    the tenant's chain, by ``--actor``, saying new then changed, the transport and target (the
    program's name, the URL's host) and the policy's digest; the command's token is not in it."""
    policy = tmp_path / "p.toml"
    policy.write_text('[tools.lookup]\nside_effect = "read"\n')
    call_command(
        "keelgate_mcp_upstream",
        tenant="acme",
        name="mail",
        command="/opt/bin/mail-mcp --token s3cret-tok",
        policy=str(policy),
        actor="ops-alice",
    )
    call_command("keelgate_mcp_upstream", tenant="acme", name="mail", url="https://mail.example/mcp?k=1")
    first, second = AuditEvent.objects.filter(tenant_id="acme", kind="mcp.upstream_registered").order_by(
        "seq"
    )
    assert (first.actor, second.actor) == ("ops-alice", "operator")
    one, two = json.loads(first.body), json.loads(second.body)
    assert (one["upstream"], one["created"], one["transport"], one["target"], one["via"]) == (
        "mail",
        True,
        "stdio",
        "mail-mcp",
        "command",
    )
    assert (two["created"], two["transport"], two["target"]) == (False, "http", "mail.example")
    assert one["policy_sha256"] == canonical_sha256({"tools": {"lookup": {"side_effect": "read"}}})
    assert one["policy_sha256"] != two["policy_sha256"]
    assert "s3cret" not in first.body and "k=1" not in second.body
    assert not AuditEvent.objects.filter(tenant_id="other").exists()


def test_the_admin_registers_and_changes_through_the_service_and_is_audited(tenants, admin_client):
    """Added then changed in the admin: the same service, so one event each, by the admin user,
    ``via`` admin; the name and tenant are fixed once the upstream exists."""
    response = admin_client.post(
        "/admin/mcp_gateway/upstream/add/",
        {"tenant_id": "acme", "name": "crm", "command": "crm-mcp", "url": "", "policy": "{}"},
    )
    assert response.status_code == 302, response.content.decode()[-2000:]
    upstream = Upstream.objects.get(tenant_id="acme", name="crm")
    assert upstream.created_by == "admin"
    response = admin_client.post(
        f"/admin/mcp_gateway/upstream/{upstream.pk}/change/",
        {
            "tenant_id": "other",
            "name": "renamed",
            "command": "",
            "url": "https://crm.example/mcp",
            "policy": "{}",
        },
    )
    assert response.status_code == 302, response.content.decode()[-2000:]
    (upstream,) = Upstream.objects.all()
    assert (upstream.tenant_id, upstream.name, upstream.url) == ("acme", "crm", "https://crm.example/mcp")
    events = AuditEvent.objects.filter(tenant_id="acme", kind="mcp.upstream_registered").order_by("seq")
    assert [(e.actor, json.loads(e.body)["created"], json.loads(e.body)["via"]) for e in events] == [
        ("admin", True, "admin"),
        ("admin", False, "admin"),
    ]


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"tenant": "nope", "name": "m", "command": "x"}, "no tenant"),
        ({"tenant": "acme", "name": "a__b", "command": "x"}, "upstream name"),
        ({"tenant": "acme", "name": "m", "command": "x", "policy": "BAD"}, "side_effect"),
    ],
)
def test_the_command_refuses_what_it_cannot_use(tenants, tmp_path, options, says):
    """An unknown tenant, a name with ``__``, a policy that does not validate: CommandError, nothing saved."""
    if options.get("policy") == "BAD":
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps({"tools": {"send": {"side_effect": "delete"}}}))
        options = {**options, "policy": str(bad)}
    with pytest.raises(CommandError, match=says):
        call_command("keelgate_mcp_upstream", **options)
    assert not Upstream.objects.exists()


def test_the_command_needs_exactly_one_of_command_and_url(tenants):
    """argparse refuses both, and neither."""
    with pytest.raises(CommandError):
        call_command("keelgate_mcp_upstream", tenant="acme", name="m", command="x", url="https://x")
    with pytest.raises(CommandError):
        call_command("keelgate_mcp_upstream", tenant="acme", name="m")


def test_the_admin_form_validates_the_policy_and_the_name(tenants):
    """The admin refuses a bad policy, a name with ``__`` and a row with both command and url."""
    form = UpstreamForm(
        data={
            "tenant_id": "acme",
            "name": "a__b",
            "command": "x",
            "url": "https://x.example",
            "policy": '{"tools": 1}',
        }
    )
    assert not form.is_valid()
    assert {"name", "policy", "__all__"} <= set(form.errors)
    good = UpstreamForm(data={"tenant_id": "acme", "name": "mail", "command": "x", "url": "", "policy": "{}"})
    assert good.is_valid(), good.errors


def test_a_run_of_mcp_name_gets_the_tenants_upstream_and_its_policy(tenants):
    """The agent has the listed tools as ``<name>__<tool>``, their side effects from the policy
    (an unnamed tool a WRITE needing approval); another tenant has no such agent."""
    Upstream.objects.create(
        tenant_id="acme",
        name="mail",
        command="x",
        tools=TOOLS,
        policy={"tools": {"lookup": {"side_effect": "read"}}},
    )
    agent = load_agent("mcp:mail", tenant_id="acme")
    tools = {t.name: t for t in agent.tools}
    assert tools["mail__lookup"].side_effect is SideEffect.READ
    assert tools["mail__send"].side_effect is SideEffect.WRITE
    assert agent.policy is not None
    assert agent.policy.requirement(agent_id="mcp:mail", tool=tools["mail__send"], arguments=None) is not None
    assert agent.policy.requirement(agent_id="mcp:mail", tool=tools["mail__lookup"], arguments=None) is None
    with pytest.raises(UnknownAgentError):
        load_agent("mcp:mail", tenant_id="other")
    with pytest.raises(UnknownAgentError):
        load_agent("mcp:mail")
