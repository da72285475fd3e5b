"""The audit API after a retirement: retired events are 410 ``audit_retired``, lists start
at the cut, proofs and exports of what is kept verify; export's parameters are 422 naming
the field, never 500; another tenant sees nothing of it."""

from __future__ import annotations

import base64
import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

from audit.checkpoints import sign_checkpoint
from audit.wiring import audit_log, integrate_pending
from keelgate.audit import (
    VerifierKey,
    check_consistency,
    check_inclusion,
    open_note,
    parse_checkpoint,
    verify_bundle,
)
from tests.site.api.test_errors import assert_error

CUT = 11
"""t1 retires the events below this."""


def append(tenant_id: str, count: int, start: int = 0) -> None:
    log = audit_log()
    for n in range(start, start + count):
        log.record(tenant_id, actor="op", kind="note", body={"n": n})
    integrate_pending([tenant_id])


@pytest.fixture
def retired(keys, tmp_path: Path) -> int:
    """t1: 20 events, a checkpoint at 8, the events below CUT retired; t2: 15 events. t1's
    checkpoint of size 8, signed before the retirement."""
    append("t1", 8)
    early = sign_checkpoint("t1")
    append("t1", 12, start=8)
    append("t2", 15)
    archive = str(tmp_path / "a.json")
    call_command(
        "keelgate_audit_retire", "--tenant", "t1", "--before-seq", str(CUT), "--archive", archive, "--yes",
        stdout=StringIO(),
    )  # fmt: skip
    assert early is not None
    return early.size


def _root(client) -> tuple[int, bytes]:
    key = VerifierKey.parse(client.get("/audit/key").json()["vkey"])
    body = parse_checkpoint(open_note(client.get("/audit/checkpoint").content.decode(), [key])[0])
    return body.size, body.root


def test_a_retired_event_is_410_and_a_kept_one_proves(client, retired):
    """Inclusion of a retired event is 410 audit_retired naming seq and the cut; of a kept one,
    it checks; consistency from the checkpoint signed before the retirement checks."""
    size, root = _root(client)
    for seq in (1, CUT - 1):
        body = assert_error(client.get("/audit/proof/inclusion", {"seq": seq}), 410, "audit_retired")
        assert "query.seq" in body["detail"] and f"events below {CUT} were retired" in body["detail"]
    items = client.get("/audit/events").json()["items"]
    assert [e["seq"] for e in items] == list(range(CUT, 22))  # the list starts at the cut
    assert items[-1]["kind"] == "audit.retired"
    for item in items:
        proof = client.get("/audit/proof/inclusion", {"seq": item["seq"], "tree_size": size}).json()
        hashes = [base64.b64decode(h) for h in proof["hashes"]]
        check_inclusion(item["seq"] - 1, size, bytes.fromhex(item["leaf_hash"]), hashes, root)
    early = client.get("/audit/checkpoints").json()["items"][-1]
    assert early["size"] == retired
    proof = client.get("/audit/proof/consistency", {"first": retired, "second": size}).json()
    hashes = [base64.b64decode(h) for h in proof["hashes"]]
    check_consistency(retired, size, base64.b64decode(early["root"]), root, hashes)
    assert client.get("/audit/events", {"after_seq": 0, "limit": 3}).json()["items"][0]["seq"] == CUT
    report = client.get("/audit/verify").json()
    assert (report["ok"], report["checked"], report["head_seq"]) == (True, 21 - CUT + 1, 21)


def test_export_after_a_retirement(client, retired):
    """The default export starts at the cut and verifies, with the consistency proof from a
    checkpoint kept before the retirement; from or to a retired event is 410."""
    bundle = client.get("/audit/export", {"previous": retired})
    assert bundle.status_code == 200
    data = bundle.json()
    assert data["from_seq"] == CUT
    early = next(c for c in client.get("/audit/checkpoints").json()["items"] if c["size"] == retired)
    report = verify_bundle(json.dumps(data), previous=early["note"])
    assert (report.from_seq, report.previous_size) == (CUT, retired)
    for params, field in (({"from_seq": 3}, "from_seq"), ({"to_seq": 5}, "to_seq")):
        body = assert_error(client.get("/audit/export", params), 410, "audit_retired")
        assert f"query.{field}" in body["detail"]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"previous": -1}, "previous"),
        ({"previous": 0}, "previous"),
        ({"previous": "x"}, "previous"),
        ({"previous": 2**70}, "previous"),
        ({"previous": 999}, "previous"),
        ({"previous": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17]}, "previous"),
        ({"from_seq": -1}, "from_seq"),
        ({"from_seq": 0}, "from_seq"),
        ({"from_seq": 99}, "from_seq"),
        ({"from_seq": 2**64}, "from_seq"),
        ({"to_seq": -5}, "to_seq"),
        ({"to_seq": 99}, "to_seq"),
        ({"from_seq": 5, "to_seq": 3}, "from_seq"),
    ],
)
def test_every_export_parameter_out_of_range_is_422_naming_it(client, keys, params, field):
    """previous=-1 answered 500; now it, and every export parameter out of range, is 422 naming its field."""
    append("t1", 6)
    response = client.get("/audit/export", params)
    assert response.status_code == 422, response.content
    body = response.json()
    assert body["code"] in ("invalid_input", "proof_out_of_range") and f"query.{field}" in body["detail"], (
        body
    )


def test_another_tenant_sees_nothing_of_a_retirement(api, keys, retired):
    """t2's key: its own log whole from 1 (its events at numbers t1 retired are served), its
    own proofs, its own export; t1's cut never shows."""
    other = api(keys.t2)
    items = other.get("/audit/events", {"limit": 500}).json()["items"]
    assert [e["seq"] for e in items] == list(range(1, 16))
    assert all(e["kind"] != "audit.retired" for e in items)
    assert other.get("/audit/proof/inclusion", {"seq": 1}).status_code == 200
    bundle = other.get("/audit/export").json()
    assert (bundle["tenant_id"], bundle["from_seq"], bundle["to_seq"]) == ("t2", 1, 15)
    assert other.get("/audit/verify").json()["checked"] == 15
    assert other.get("/audit/proof/inclusion", {"seq": 1, "tenant": "t1"}).status_code in (404, 422)
