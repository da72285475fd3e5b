"""POST /runs with an Idempotency-Key header: one run per key, whatever the retries.

The first request answers 201 with the new run; a repeat with the same key and body
answers 200 with the same run and the header ``Idempotent-Replayed: true``, starting
nothing. The same key with another body is 422 ``idempotency_key_reused``; a repeat while
the first is still in progress is 409 ``idempotency_key_in_progress``.
"""

from __future__ import annotations

import threading

from django.db import connection

import runs.idempotency_keys
from audit.models import AuditEvent
from runs.models import ApiIdempotencyKey, Run

START = {"agent": "paper-trader", "goal": "buy 10 ACME"}


def test_the_same_key_and_body_returns_the_same_run_and_starts_nothing(client):
    """201 then 200 with the same run id; one Run row and one run.requested event."""
    first = client.post("/runs", START, **{"Idempotency-Key": "k-1"})
    assert first.status_code == 201 and "Idempotent-Replayed" not in first
    again = client.post(
        "/runs", {"goal": "buy 10 ACME", "agent": "paper-trader"}, **{"Idempotency-Key": "k-1"}
    )
    assert again.status_code == 200 and again["Idempotent-Replayed"] == "true"
    assert again.json()["run_id"] == first.json()["run_id"]
    assert Run.objects.count() == 1
    assert AuditEvent.objects.filter(kind="run.requested").count() == 1


def test_the_same_key_with_another_body_is_422(client):
    """A different goal under a used key is idempotency_key_reused and starts nothing."""
    client.post("/runs", START, **{"Idempotency-Key": "k-1"})
    other = client.post("/runs", {**START, "goal": "buy 11 ACME"}, **{"Idempotency-Key": "k-1"})
    assert other.status_code == 422
    assert other.json() == {
        "code": "idempotency_key_reused",
        "detail": "This Idempotency-Key was already used with a different request.",
    }
    assert Run.objects.count() == 1


def test_a_twin_of_a_request_still_in_progress_is_409(client, monkeypatch):
    """While the first request is inside run_start its twin is 409 idempotency_key_in_progress; one run."""
    entered, release = threading.Event(), threading.Event()
    real_start = runs.idempotency_keys.run_start

    def slow_start(**kwargs):
        entered.set()
        assert release.wait(timeout=30)
        return real_start(**kwargs)

    monkeypatch.setattr(runs.idempotency_keys, "run_start", slow_start)
    outcome: dict[str, int] = {}

    def first() -> None:
        try:
            outcome["first"] = client.post("/runs", START, **{"Idempotency-Key": "k-twin"}).status_code
        finally:
            connection.close()

    thread = threading.Thread(target=first)
    thread.start()
    assert entered.wait(timeout=30)
    twin = client.post("/runs", START, **{"Idempotency-Key": "k-twin"})
    release.set()
    thread.join(timeout=60)
    assert twin.status_code == 409 and twin.json()["code"] == "idempotency_key_in_progress"
    assert outcome["first"] == 201
    assert Run.objects.count() == 1
    replay = client.post("/runs", START, **{"Idempotency-Key": "k-twin"})
    assert replay.status_code == 200 and Run.objects.count() == 1


def test_a_refused_first_request_does_not_burn_the_key(client):
    """If the first request is refused (unknown agent), the key is free for the corrected request."""
    refused = client.post("/runs", {**START, "agent": "nope"}, **{"Idempotency-Key": "k-fix"})
    assert refused.status_code == 422 and refused.json()["code"] == "unknown_agent"
    assert not ApiIdempotencyKey.objects.exists()
    fixed = client.post("/runs", START, **{"Idempotency-Key": "k-fix"})
    assert fixed.status_code == 201


def test_a_first_request_that_died_mid_way_is_taken_over(client, keys):
    """An in-progress key older than the timeout (its request died) lets a repeat start the run."""
    client.post("/runs", START, **{"Idempotency-Key": "k-dead"})
    row = ApiIdempotencyKey.objects.get(key="k-dead")
    Run.objects.all().delete()
    died_at = row.created_at - runs.idempotency_keys.IN_PROGRESS_TIMEOUT * 2
    ApiIdempotencyKey.objects.filter(pk=row.pk).update(completed_at=None, run_id="", created_at=died_at)
    retried = client.post("/runs", START, **{"Idempotency-Key": "k-dead"})
    assert retried.status_code == 201 and Run.objects.count() == 1


def test_keys_are_scoped_to_the_user_and_tenant(client, api, keys):
    """The same key string from another tenant's key starts that tenant's own run."""
    client.post("/runs", START, **{"Idempotency-Key": "shared"})
    theirs = api(keys.t2).post("/runs", START, **{"Idempotency-Key": "shared"})
    assert theirs.status_code == 201
    assert sorted(Run.objects.values_list("tenant_id", flat=True)) == ["t1", "t2"]


def test_the_same_run_id_without_a_key_is_idempotent_too(client):
    """With run_id in the body a repeat is 200 with the same run, and no key row is stored."""
    assert client.post("/runs", {**START, "run_id": "mine"}).status_code == 201
    assert client.post("/runs", {**START, "run_id": "mine"}).status_code == 200
    assert Run.objects.count() == 1 and not ApiIdempotencyKey.objects.exists()
