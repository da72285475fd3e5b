"""An API approval names the arguments it approves (issue 32): ``arguments_hash`` is
required, as the console always sends it, unless the site relaxes it with
``KEELGATE_APPROVE_WITHOUT_ARGUMENTS_HASH``; the OpenAPI document says which."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from approvals.models import Approval, ApprovalStatus
from tests.site.api.test_errors import assert_error

ROOT = Path(__file__).resolve().parents[3]


def test_an_approval_without_the_hash_is_422_and_approves_nothing(client, pending):
    """No body, an empty body, a body with only a note: 422 naming what is missing; still pending."""
    url = f"/approvals/{pending.pk}/approve"
    assert "body: Field required" in assert_error(client.post(url), 422, "invalid_input")["detail"]
    for body in [{}, {"note": "looks fine"}, {"confirm_high_impact": True}]:
        detail = assert_error(client.post(url, body), 422, "invalid_input")["detail"]
        assert "arguments_hash" in detail, (body, detail)
    edit = client.post(url, {"arguments": {**json.loads(pending.arguments), "quantity": 1}})
    assert "arguments_hash" in assert_error(edit, 422, "invalid_input")["detail"]
    assert Approval.objects.get(pk=pending.pk).status == ApprovalStatus.PENDING
    bound = client.post(url, {"arguments_hash": pending.arguments_hash, "note": "looks fine"})
    assert bound.status_code == 200, bound.content


def test_a_bulk_approve_names_each_hash_and_a_bulk_deny_need_not(client, pending):
    """Each bulk-approve item must carry its hash (422 otherwise); a denial may omit it."""
    refused = client.post("/approvals/bulk/approve", {"items": [{"id": pending.pk}]})
    assert "arguments_hash" in assert_error(refused, 422, "invalid_input")["detail"]
    assert Approval.objects.get(pk=pending.pk).status == ApprovalStatus.PENDING
    denied = client.post("/approvals/bulk/deny", {"items": [{"id": pending.pk}], "note": "not today"})
    assert denied.status_code == 200 and denied.json()["results"][0]["status"] == "denied"


def _approve_schema(env: dict[str, str]) -> dict[str, object]:
    """The approve operation's request body and ApproveIn's required fields, as a fresh process
    with ``env`` builds the OpenAPI document (the setting is read once, at import)."""
    script = (
        "import django, json; django.setup()\n"
        "from keelgate_site.api import api\n"
        "doc = api.get_openapi_schema()\n"
        "op = doc['paths']['/api/v1/approvals/{approval_id}/approve']['post']\n"
        "schemas = doc['components']['schemas']\n"
        "print(json.dumps({'body_required': op['requestBody'].get('required', False),\n"
        "  'approve': schemas['ApproveIn'].get('required', []),\n"
        "  'bulk_item': schemas['BulkApproveItemIn'].get('required', [])}))\n"
    )
    full = {**os.environ, "DJANGO_SETTINGS_MODULE": "keelgate_site.settings", "PYTHONPATH": str(ROOT), **env}
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=full, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_openapi_document_says_whether_the_hash_is_required():
    """By default the body and its hash are required; the setting makes both optional."""
    strict = _approve_schema({"KEELGATE_APPROVE_WITHOUT_ARGUMENTS_HASH": ""})
    assert strict == {
        "body_required": True,
        "approve": ["arguments_hash"],
        "bulk_item": ["arguments_hash", "id"],
    }
    relaxed = _approve_schema({"KEELGATE_APPROVE_WITHOUT_ARGUMENTS_HASH": "1"})
    assert relaxed == {"body_required": False, "approve": [], "bulk_item": ["id"]}
