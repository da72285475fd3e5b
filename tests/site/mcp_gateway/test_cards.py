"""The inbox card of an MCP call shows the upstream, the tool's description (escaped: an
upstream writes it) and the arguments, on approvals and unknown outcomes alike."""

from __future__ import annotations

import sys

import pytest

from approvals.models import Approval, UnknownOutcome
from keelgate.contrib.mcp import call_identity
from mcp_gateway.models import Upstream
from mcp_gateway.services import call_start
from tests.site.console.conftest import drain, login
from tests.site.mcp_gateway._live import UPSTREAM

pytestmark = pytest.mark.django_db(transaction=True)

EVIL = '<script>alert("x")</script><img src=x onerror=alert(1)> Send & forget'
ESCAPED = (
    "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt; Send &amp; forget"
)


def _call(people, upstream: Upstream, tool: str, arguments: dict) -> str:
    identity = call_identity(
        tenant_id="t1", mcp_run="m", tool=f"{upstream.name}__{tool}", arguments=arguments
    )
    call_start(
        tenant_id="t1",
        user=people["bob"],
        upstream=upstream,
        tool=tool,
        arguments=arguments,
        run_id=identity.run_id,
    )
    drain()
    return identity.run_id


def test_mcp_cards_show_the_upstream_the_escaped_description_and_the_arguments(people, tmp_path):
    """An approval card (``send``) and an unknown-outcome card (``crash``, which dies
    mid-call) both name upstream ``evil``, show the tool's hostile description only as
    escaped text, and show the arguments."""
    upstream = Upstream.objects.create(
        tenant_id="t1",
        name="evil",
        command=f"{sys.executable} {UPSTREAM} {tmp_path / 'ledger'}",
        tools=[
            {"name": "send", "description": EVIL, "inputSchema": {"type": "object"}},
            {"name": "crash", "description": "Dies <b>mid-call</b>.", "inputSchema": {"type": "object"}},
        ],
        policy={"tools": {"send": {"approval": True}, "crash": {"approval": False}}},
    )
    approval_run = _call(people, upstream, "send", {"to": "ann", "text": "<i>hi</i>"})
    unknown_run = _call(people, upstream, "crash", {"why": "boom"})
    approval = Approval.objects.get(tenant_id="t1", run_id=approval_run)
    unknown = UnknownOutcome.objects.get(tenant_id="t1", run_id=unknown_run)
    page = login(people["op"]).get("/").content.decode()
    a_card = page[page.index(f'id="item-a-{approval.pk}"') :]
    a_card = a_card[: a_card.index("</article>")]
    u_card = page[page.index(f'id="item-u-{unknown.pk}"') :]
    u_card = u_card[: u_card.index("</article>")]
    assert "<code>evil</code>" in a_card and ESCAPED in a_card
    assert "&lt;i&gt;hi&lt;/i&gt;" in a_card  # the arguments, escaped too
    assert "<code>evil</code>" in u_card and "Dies &lt;b&gt;mid-call&lt;/b&gt;." in u_card
    assert "boom" in u_card
    assert "<script>" not in page and "<img src=x" not in page and "<b>mid-call" not in page


def test_a_card_whose_upstream_is_gone_still_renders_without_it(people, tmp_path):
    """The upstream removed after the call waited: the card shows, with no upstream line."""
    upstream = Upstream.objects.create(
        tenant_id="t1",
        name="gone",
        command="x",
        tools=[{"name": "send", "description": "Send.", "inputSchema": {"type": "object"}}],
    )
    run_id = _call(people, upstream, "send", {"to": "ann"})
    approval = Approval.objects.get(tenant_id="t1", run_id=run_id)
    upstream.delete()
    page = login(people["op"]).get("/").content.decode()
    assert f'id="item-a-{approval.pk}"' in page and "MCP upstream" not in page
