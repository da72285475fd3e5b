"""The audit log as a Merkle tree, through the API: leaves anyone can recompute,
signed checkpoints, and proofs that check with the RFC 9162 algorithms."""

from __future__ import annotations

import base64

import pytest

from audit.checkpoints import sign_checkpoint
from audit.models import AuditEvent, Checkpoint
from keelgate.audit import (
    VerifierKey,
    check_consistency,
    check_inclusion,
    object_leaf_hash,
    open_note,
    parse_checkpoint,
)


def _checkpoint(client) -> tuple[int, bytes]:
    """Sign a checkpoint now and read it back through the API, verified with the API's key."""
    sign_checkpoint("t1")
    note = client.get("/audit/checkpoint")
    assert note.status_code == 200 and note["Content-Type"].startswith("text/plain")
    key = VerifierKey.parse(client.get("/audit/key").json()["vkey"])
    text, signers = open_note(note.content.decode(), [key])
    body = parse_checkpoint(text)
    assert signers == [key] and body.origin == key.name and body.origin.endswith("/keelgate/t1")
    return body.size, body.root


def test_every_event_carries_its_leaf_and_the_leaf_hash_is_recomputable(client, pending):
    """sha256(0x00 || JCS(leaf)) of each event's `leaf` is its `leaf_hash`; leaf_index = seq - 1."""
    items = client.get("/audit/events").json()["items"]
    assert items
    for item in items:
        assert item["leaf_index"] == item["seq"] - 1
        assert item["leaf"]["seq"] == item["seq"] and item["leaf"]["body"] == item["body"]
        assert item["leaf"]["v"] == 2 and item["prev_hash"] is None and item["hash"] is None
        assert object_leaf_hash(item["leaf"]).hex() == item["leaf_hash"]


def test_inclusion_proofs_check_against_the_signed_checkpoint(client, pending):
    """Each event's inclusion proof leads to the signed root; a wrong leaf does not."""
    size, root = _checkpoint(client)
    items = client.get("/audit/events").json()["items"]
    for item in items[:size]:
        proof = client.get("/audit/proof/inclusion", {"seq": item["seq"], "tree_size": size}).json()
        assert proof["leaf_index"] == item["seq"] - 1 and proof["tree_size"] == size
        hashes = [base64.b64decode(h) for h in proof["hashes"]]
        check_inclusion(proof["leaf_index"], size, bytes.fromhex(item["leaf_hash"]), hashes, root)
    with pytest.raises(ValueError):
        check_inclusion(0, size, bytes(32), [base64.b64decode(h) for h in proof["hashes"]], root)


def test_consistency_proofs_link_every_two_checkpoints(client, pending):
    """The log only grew between two checkpoints: their consistency proof checks."""
    first_size, first_root = _checkpoint(client)
    client.post(f"/approvals/{pending.pk}/approve", {"arguments_hash": pending.arguments_hash})
    second_size, second_root = _checkpoint(client)
    assert second_size > first_size
    proof = client.get("/audit/proof/consistency", {"first": first_size, "second": second_size}).json()
    hashes = [base64.b64decode(h) for h in proof["hashes"]]
    check_consistency(first_size, second_size, first_root, second_root, hashes)
    listed = client.get("/audit/checkpoints").json()
    assert [c["size"] for c in listed["items"]] == [second_size, first_size]


def test_no_checkpoint_is_signed_twice_for_one_size(client, pending):
    """Signing again without new events stores nothing new."""
    _checkpoint(client)
    count = Checkpoint.objects.filter(tenant_id="t1").count()
    assert sign_checkpoint("t1") is None
    assert Checkpoint.objects.filter(tenant_id="t1").count() == count


@pytest.mark.parametrize(
    ("path", "params", "field"),
    [
        ("/audit/proof/inclusion", {"seq": 0}, "seq"),
        ("/audit/proof/inclusion", {"seq": -1}, "seq"),
        ("/audit/proof/inclusion", {"seq": "x"}, "seq"),
        ("/audit/proof/inclusion", {"seq": 1, "tree_size": 10**9}, "tree_size"),
        ("/audit/proof/inclusion", {"seq": 10**9}, "seq"),
        ("/audit/proof/inclusion", {"seq": 1.5}, "seq"),
        ("/audit/proof/consistency", {"first": 0}, "first"),
        ("/audit/proof/consistency", {"first": 2, "second": 1}, "first"),
        ("/audit/proof/consistency", {"first": 1, "second": 10**9}, "second"),
        ("/audit/proof/consistency", {}, "first"),
    ],
)
def test_proof_parameters_out_of_range_are_422_naming_the_field(client, pending, path, params, field):
    """Negative, zero, non-integer or beyond the log: 422 whose detail names the parameter."""
    response = client.get(path, params)
    assert response.status_code == 422, response.content
    assert field in response.json()["detail"]


def test_another_tenants_log_is_not_reachable(api, keys, pending, pending_t2):
    """t2's key sees t2's checkpoint and proofs only; t1's numbers beyond t2's log are refused."""
    sign_checkpoint("t1")
    other = api(keys.t2)
    assert other.get("/audit/checkpoint").status_code == 404  # t2 has no checkpoint yet
    sign_checkpoint("t2")
    note = other.get("/audit/checkpoint").content.decode()
    assert "/keelgate/t2\n" in note and "/keelgate/t1" not in note
    t1_size = AuditEvent.objects.filter(tenant_id="t1").count()
    t2_size = AuditEvent.objects.filter(tenant_id="t2").count()
    if t1_size > t2_size:
        assert other.get("/audit/proof/inclusion", {"seq": t1_size}).status_code == 422
    assert other.get("/audit/key").json()["origin"].endswith("/keelgate/t2")


def test_admins_export_a_bundle_that_verifies_and_viewers_cannot(api, keys, client, pending):
    """GET /audit/export: an admin's bundle verifies with the engine; a viewer is refused."""
    from keelgate.audit import verify_bundle

    bundle = client.get("/audit/export").json()
    report = verify_bundle(bundle, vkey=VerifierKey.parse(client.get("/audit/key").json()["vkey"]))
    assert report.to_seq == len(client.get("/audit/events").json()["items"])
    part = client.get("/audit/export", {"from_seq": 2, "to_seq": 3}).json()
    assert [e["seq"] for e in part["events"]] == [2, 3]
    verify_bundle(part)
    assert api(keys.viewer).get("/audit/export").status_code == 403
    assert client.get("/audit/export", {"from_seq": 0}).status_code == 422


def test_gos_reference_verifier_accepts_the_products_checkpoint_and_proofs(client, pending):
    """Go's sumdb/note opens the API's checkpoint with the API's key; sumdb/tlog checks every
    event's inclusion (hashing the leaf's RFC 8785 bytes itself) and the consistency with an
    earlier checkpoint. A tampered checkpoint is refused."""
    from keelgate.audit import leaf_bytes
    from tests.interop.go_reference import document, go_check

    first_size, first_root = _checkpoint(client)
    client.post(f"/approvals/{pending.pk}/approve", {"arguments_hash": pending.arguments_hash})
    size, _ = _checkpoint(client)
    note = client.get("/audit/checkpoint").content.decode()
    vkey = client.get("/audit/key").json()["vkey"]
    inclusion = []
    for item in client.get("/audit/events").json()["items"][:size]:
        proof = client.get("/audit/proof/inclusion", {"seq": item["seq"], "tree_size": size}).json()
        hashes = [base64.b64decode(h) for h in proof["hashes"]]
        inclusion.append(
            (proof["leaf_index"], bytes.fromhex(item["leaf_hash"]), hashes, leaf_bytes(item["leaf"]))
        )
    consistency = client.get("/audit/proof/consistency", {"first": first_size, "second": size}).json()
    old = (first_size, first_root, [base64.b64decode(h) for h in consistency["hashes"]])
    done = go_check(document(key=vkey, note=note, inclusion=inclusion, consistency=[old]))
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("ok") >= len(inclusion) + 2
    origin, count, root, rest = note.split("\n", 3)
    forged = "\n".join([origin, str(int(count) + 1), root, rest])
    refused = go_check(document(key=vkey, note=forged, inclusion=inclusion[:1]))
    assert refused.returncode != 0 and "FAIL" in refused.stderr
