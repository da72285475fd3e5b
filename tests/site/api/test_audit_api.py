"""The audit router: events paged by seq, verification, the signed head and checking it later."""

from __future__ import annotations

from audit.models import AuditEvent


def test_events_are_paged_by_seq_and_carry_the_actor(client, pending):
    """GET /audit/events: oldest first; next_after_seq continues; actors are the people who acted."""
    everything = client.get("/audit/events").json()
    seqs = [e["seq"] for e in everything["items"]]
    assert seqs == list(range(1, len(seqs) + 1)) and everything["next_after_seq"] is None
    first = client.get("/audit/events", {"limit": 2}).json()
    assert [e["seq"] for e in first["items"]] == [1, 2] and first["next_after_seq"] == 2
    rest = client.get("/audit/events", {"after_seq": 2}).json()
    assert [e["seq"] for e in rest["items"]] == seqs[2:]
    requested = next(e for e in everything["items"] if e["kind"] == "run.requested")
    assert requested["actor"] == "op" and requested["body"]["run_id"] == "r1"


def test_verify_reports_an_intact_chain_and_finds_an_edit(client, pending):
    """GET /audit/verify is ok on an intact chain and reports the first bad seq after an edit."""
    report = client.get("/audit/verify").json()
    assert report["ok"] is True and report["checked"] == report["head_seq"] > 0
    AuditEvent.objects.filter(tenant_id="t1", seq=2).update(actor="mallory")
    broken = client.get("/audit/verify").json()
    assert broken["ok"] is False and broken["first_bad_seq"] == 2


def test_the_head_is_a_signed_digest_that_verifies_later(client, pending):
    """GET /audit/head, then POST /audit/verify with it: ok; an edited digest is 422."""
    digest = client.get("/audit/head").json()
    assert digest["tenant_id"] == "t1" and digest["seq"] >= 1 and len(digest["hash"]) == 64
    client.post(f"/approvals/{pending.pk}/approve")
    later = client.post("/audit/verify", digest)
    assert later.status_code == 200 and later.json()["ok"] is True
    forged = client.post("/audit/verify", {**digest, "seq": digest["seq"] + 1})
    assert forged.status_code == 422 and forged.json()["code"] == "digest_signature_invalid"
    extra = client.post("/audit/verify", {**digest, "note": "x"})
    assert extra.status_code == 422 and "body.note" in extra.json()["detail"]


def test_a_rewritten_history_fails_the_kept_digest(client, pending):
    """Rewriting the event at the digest's seq makes POST /audit/verify report digest_mismatch or a break."""
    digest = client.get("/audit/head").json()
    AuditEvent.objects.filter(tenant_id="t1", seq=digest["seq"]).update(hash="0" * 64)
    report = client.post("/audit/verify", digest).json()
    assert report["ok"] is False


def test_a_tenant_without_events_has_no_head(api, keys):
    """GET /audit/head for an empty chain is 404 audit_chain_empty."""
    response = api(keys.t2).get("/audit/head")
    assert response.status_code == 404 and response.json()["code"] == "audit_chain_empty"


def test_a_broken_chain_is_not_signed(client, pending):
    """GET /audit/head on a tampered chain is 409 audit_chain_broken."""
    AuditEvent.objects.filter(tenant_id="t1", seq=1).update(kind="edited")
    response = client.get("/audit/head")
    assert response.status_code == 409 and response.json()["code"] == "audit_chain_broken"
