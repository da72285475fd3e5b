"""``tools/list`` at /mcp/: the upstream's annotations passed on as hints, and pages with a cursor."""

from __future__ import annotations

from types import SimpleNamespace

import mcp_types as types
import pytest
from asgiref.sync import async_to_sync
from django.utils import timezone
from mcp.shared.exceptions import MCPError

from mcp_gateway.models import Upstream
from mcp_gateway.server import ANNOTATIONS_META, McpCaller, list_tools

pytestmark = pytest.mark.django_db(transaction=True)


def _ctx(people) -> SimpleNamespace:
    caller = McpCaller(user=people["bob"], tenant_id="t1", key_prefix="kg_test")
    return SimpleNamespace(request=SimpleNamespace(scope={"keelgate.mcp_caller": caller}))


def _listed(n: int) -> list[dict]:
    return [
        {"name": f"t{i:02d}", "description": f"tool {i}", "inputSchema": {"type": "object"}} for i in range(n)
    ]


def test_annotations_pass_through_marked_as_hints_and_the_policy_decides(people):
    """``send`` claims ``readOnlyHint``: offered with that annotation as the upstream wrote it,
    ``_meta`` calling it a hint, and the policy's word: a WRITE that needs approval."""
    Upstream.objects.create(
        tenant_id="t1",
        name="liar",
        command="x",
        tools=[
            {
                "name": "send",
                "inputSchema": {"type": "object"},
                "annotations": {"readOnlyHint": True, "destructiveHint": False, "title": "Send"},
            },
            {"name": "lookup", "inputSchema": {"type": "object"}},
        ],
        tools_listed_at=timezone.now(),
        policy={"tools": {"lookup": {"side_effect": "read"}}},
    )
    result = async_to_sync(list_tools)(_ctx(people), None)
    tools = {t.name: t for t in result.tools}
    send = tools["liar__send"]
    assert send.annotations is not None and send.annotations.read_only_hint is True
    assert send.annotations.destructive_hint is False
    assert send.meta is not None and "hints" in send.meta[ANNOTATIONS_META]
    assert (send.meta["io.keelgate/side_effect"], send.meta["io.keelgate/approval"]) == ("write", True)
    lookup = tools["liar__lookup"]
    assert lookup.annotations is None
    assert (lookup.meta["io.keelgate/side_effect"], lookup.meta["io.keelgate/approval"]) == ("read", False)


def test_the_list_comes_in_pages_whose_cursors_cover_every_tool_once(people, settings):
    """Page size 4 over 10 tools of two upstreams: pages of 4, 4, 2, the last without a cursor;
    a made-up cursor is an invalid-params error."""
    settings.KEELGATE_MCP_TOOLS_PAGE = 4
    now = timezone.now()
    Upstream.objects.create(tenant_id="t1", name="a", command="x", tools=_listed(6), tools_listed_at=now)
    Upstream.objects.create(tenant_id="t1", name="b", command="x", tools=_listed(4), tools_listed_at=now)
    Upstream.objects.create(tenant_id="t2", name="c", command="x", tools=_listed(3), tools_listed_at=now)
    seen, sizes, cursor = [], [], None
    while True:
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = async_to_sync(list_tools)(_ctx(people), params)
        seen += [t.name for t in page.tools]
        sizes.append(len(page.tools))
        cursor = page.next_cursor
        if cursor is None:
            break
    assert sizes == [4, 4, 2]
    assert sorted(seen) == sorted({*seen}) and len(seen) == 10
    assert not any(name.startswith("c__") for name in seen)
    for bad in ("tools-x", "nope", "tools-" + "9" * 12):
        with pytest.raises(MCPError):
            async_to_sync(list_tools)(_ctx(people), types.PaginatedRequestParams(cursor=bad))
