"""Errors: one JSON shape with a stable code and fixed wording, never a 500 for bad input."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from approvals.models import Approval
from keelgate import errors
from runs.models import Run
from sitekit.errors import (
    ForbiddenError,
    GoalNotUnderstoodError,
    NotFoundError,
    NotResumableError,
    RateLimitedError,
    UnknownAgentError,
)
from tenants.api_keys import api_key_revoke
from tenants.models import ApiKey, Membership, Role, Tenant

START = {"agent": "paper-trader", "goal": "buy 10 ACME"}


def assert_error(response, status: int, code: str) -> dict:
    """The response is ``status`` with exactly {code, detail}, code as given."""
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"code", "detail"} and body["code"] == code and body["detail"]
    return body


def test_no_wrong_or_revoked_credentials_are_401(api, keys):
    """Missing, malformed, unknown and revoked keys all get 401 unauthenticated with WWW-Authenticate."""
    for key in [None, "nope", "kg_000000000000_" + "A" * 43, keys.t1[:-1] + "x"]:
        response = api(key).get("/runs")
        assert_error(response, 401, "unauthenticated")
        assert response["WWW-Authenticate"] == "Bearer"
    api_key_revoke(by="tester", key=ApiKey.objects.get(name="op"))
    assert_error(api(keys.t1).get("/runs"), 401, "unauthenticated")
    assert api(keys.t2).get("/runs").status_code == 200


def test_a_key_of_a_user_who_left_the_tenant_stops_working(api, keys):
    """Membership is checked on every request: removing it makes the key 401."""
    Membership.objects.filter(user__username="viewer").delete()
    assert_error(api(keys.viewer).get("/runs"), 401, "unauthenticated")


def test_malformed_json_is_400_and_huge_bodies_413(client):
    """Bodies that are not JSON (or not UTF-8, or nested too deep) are 400; over the limit, 413."""
    for raw in [b"{", b"not json", b"\xff\xfe{}", b"[" * 100_000 + b"]" * 100_000]:
        body = assert_error(client.post("/runs", raw=raw), 400, "malformed_body")
        assert body["detail"] == "The request body is not valid JSON."
    huge = json.dumps({**START, "goal": "x" * (2 * 1024 * 1024)})
    assert_error(client.post("/runs", raw=huge), 413, "body_too_large")
    assert not Run.objects.exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"goal": "buy 1 ACME"}, "body.agent"),
        ({**START, "goal": 5}, "body.goal"),
        ({**START, "goal": ""}, "body.goal"),
        ({**START, "goal": "buy\x00 1 ACME"}, "body.goal"),
        ({**START, "run_id": "has space"}, "body.run_id"),
        ({**START, "surprise": True}, "body.surprise"),
        ({**START, "stop": {"max_dollars": -1}}, "body.stop.max_dollars"),
        ({**START, "stop": {"max_iterations": 2**70}}, "body.stop.max_iterations"),
        ({**START, "stop": "lots"}, "body.stop"),
        ([1, 2], "body"),
        ("text", "body"),
    ],
)
def test_invalid_input_is_422_naming_the_field(client, body, field):
    """Wrong types, missing, unknown or out-of-range fields: 422 invalid_input naming the field."""
    detail = assert_error(client.post("/runs", body), 422, "invalid_input")["detail"]
    assert field in detail, detail


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ({**START, "goal": "buy\x00 1 ACME"}, "body.goal: must not contain NUL characters."),
        ({**START, "run_id": "has space"}, "body.run_id: must be letters, digits and . _ : -, starting"),
        ({**START, "agent": "no way"}, "body.agent: is not in the accepted form."),
    ],
)
def test_a_value_that_breaks_its_pattern_is_said_in_words_never_as_a_regular_expression(client, body, said):
    """Validation messages say what is wrong in words: no "should match pattern", no regex."""
    detail = assert_error(client.post("/runs", body), 422, "invalid_input")["detail"]
    assert said in detail, detail
    assert "pattern" not in detail and "^" not in detail and "\\x00" not in detail, detail


def test_a_blank_reason_is_said_in_words(client, pending):
    """Deny with a blank note: 'must not be blank', not the pattern."""
    response = client.post(f"/approvals/{pending.pk}/deny", {"note": "   "})
    detail = assert_error(response, 422, "invalid_input")["detail"]
    assert "body.note: must not be blank, and must not contain NUL characters." in detail, detail


def test_query_and_header_values_of_the_wrong_shape_are_422(client):
    """Bad limits, NUL in filters and bad Idempotency-Key headers are validation errors."""
    for params in [
        {"limit": 0},
        {"limit": "many"},
        {"limit": 10**30},
        {"agent": "a\x00"},
        {"tenant": "Not A Slug"},
    ]:
        assert_error(client.get("/runs", params), 422, "invalid_input")
    response = client.post("/runs", START, **{"Idempotency-Key": "x" * 300})
    assert "header.Idempotency-Key" in assert_error(response, 422, "invalid_input")["detail"]


def test_unknown_paths_are_a_json_404_and_wrong_methods_405(client):
    """Paths outside the API's operations answer JSON not_found; a known path with another method is 405."""
    for path in ["/nope", "/runs/r1/nope", "/approvals//approve", "/runs/"]:
        assert_error(client.get(path), 404, "not_found")
    response = client.http.delete("/api/v1/runs")
    assert_error(response, 405, "method_not_allowed")
    assert "GET" in response["Allow"] and "POST" in response["Allow"]


def test_too_many_requests_with_one_key_is_429_with_retry_after(api, keys, settings):
    """Past KEELGATE_API_RATE_LIMIT a key gets 429 rate_limited with Retry-After; other keys do not."""
    settings.KEELGATE_API_RATE_LIMIT = 3
    client = api(keys.t1)
    for _ in range(3):
        assert client.get("/runs").status_code == 200
    response = client.get("/runs")
    assert_error(response, 429, "rate_limited")
    assert 1 <= int(response["Retry-After"]) <= settings.KEELGATE_API_RATE_WINDOW
    assert api(keys.t2).get("/runs").status_code == 200


def test_an_unexpected_exception_is_a_logged_500_with_fixed_wording(client, monkeypatch, caplog):
    """A bug is answered 500 internal_error without the exception's text, and logged with it."""

    def boom(**kwargs):
        raise RuntimeError("secret internals")

    monkeypatch.setattr("runs.api.run_rows_page", boom)
    body = assert_error(client.get("/runs"), 500, "internal_error")
    assert "secret" not in body["detail"]
    assert any("secret internals" in str(r.exc_info) for r in caplog.records if r.exc_info)


@pytest.mark.parametrize(
    ("exc", "status"),
    [
        (NotFoundError(), 404),
        (ForbiddenError("approver"), 403),
        (errors.RunExistsError("r1"), 409),
        (errors.AlreadyDecidedError("op"), 409),
        (NotResumableError("done"), 409),
        (errors.StaleCheckpointError(), 409),
        (errors.CallMayBeRunningError(), 409),
        (errors.NoteRequiredError(), 422),
        (GoalNotUnderstoodError(), 422),
        (UnknownAgentError("x"), 422),
        (RateLimitedError(3), 429),
        (errors.ActionNotFoundError(), 404),
        (errors.NotReconcilableError(), 409),
        (errors.ConfigurationError(), None),
        (errors.PlannerError(), None),
    ],
)
def test_domain_errors_carry_their_http_status(exc, status):
    """Each error class carries its status (inherited along the tree); none (a bug) is a 500."""
    assert exc.http_status == status


def test_every_error_status_is_a_client_error_or_none():
    """No error class claims a status outside 4xx: a 5xx is only ever a bug, never a verdict."""
    import sitekit.errors  # noqa: F401  (the site's tree, beside the engine's)

    classes = errors._all_subclasses(errors.KeelgateError)
    assert {c.http_status for c in classes} - {None} <= set(range(400, 500))
    assert len([c for c in classes if c.http_status is not None]) >= 20


def test_session_auth_works_for_the_browser_with_csrf_on_writes(keys, pending):
    """A logged-in session reads; an unsafe request without the CSRF token is 403, with it 200."""
    browser = Client(enforce_csrf_checks=True)
    browser.login(username="op", password="pw-op-123456")
    assert browser.get("/api/v1/approvals").json()["items"][0]["id"] == pending.pk
    url = f"/api/v1/approvals/{pending.pk}/approve"
    body = json.dumps({"arguments_hash": pending.arguments_hash})
    assert_error(browser.post(url, body, content_type="application/json"), 403, "csrf_failed")
    browser.get("/admin/login/")  # sets the csrftoken cookie
    token = browser.cookies["csrftoken"].value
    response = browser.post(url, body, content_type="application/json", headers={"X-CSRFToken": token})
    assert response.status_code == 200 and response.json()["decided_by"] == "op"
    assert Approval.objects.get(pk=pending.pk).status == "approved"


def test_a_session_user_of_several_tenants_names_one(keys, pending):
    """Two tenants and no ?tenant= is 422 tenant_required; ?tenant= picks one; a foreign one is 404."""
    user = get_user_model().objects.get(username="op")
    Membership.objects.create(user=user, tenant=Tenant.objects.create(slug="t3"), role=Role.VIEWER)
    browser = Client()
    browser.login(username="op", password="pw-op-123456")
    assert_error(browser.get("/api/v1/runs"), 422, "tenant_required")
    assert [r["run_id"] for r in browser.get("/api/v1/runs", {"tenant": "t1"}).json()["items"]] == ["r1"]
    assert browser.get("/api/v1/runs", {"tenant": "t3"}).json()["items"] == []
    assert_error(browser.get("/api/v1/runs", {"tenant": "t2"}), 404, "not_found")
