"""Logs: one JSON object per line with the ids of what a line concerns, and never a secret.

Every handler's output is captured while an operator logs in (and once fails to), calls
the API with a key (and once with a wrong one), registers a webhook that is then
delivered (and fails), and a run is driven by the worker. No password, API key,
session id or webhook secret may appear in any line.
"""

from __future__ import annotations

import io
import json
import logging

import pytest
from django.test import Client

from notifications.webhooks import deliver_due
from notifications.webhooks.services import webhook_endpoint_register
from runs.engine.worker import Worker
from runs.services import run_start
from sitekit.logs import JsonFormatter, TextFormatter, log_context
from tenants.api_keys import api_key_create
from tenants.models import Tenant

PASSWORD = "pw-op-123456"  # the operator fixture's
WRONG_PASSWORD = "wrong-Pa55word-xyzzy"


@pytest.fixture
def captured():
    """Every line any logger writes, at DEBUG, through the production JSON formatter."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    loggers = [logging.getLogger(), logging.getLogger("keelgate"), logging.getLogger("django")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        lg.setLevel(logging.DEBUG)
    yield out
    for lg, level in zip(loggers, levels, strict=True):
        lg.removeHandler(handler)
        lg.setLevel(level)


def test_no_secret_reaches_a_log_line(operator, client, captured, settings, brokerage_path):
    """Login, API key, webhook secret, session id: none of them in any line, SQL debug included."""
    settings.DEBUG = True  # SQL is logged only in debug mode: the config must still keep it out
    settings.KEELGATE_WEBHOOK_ALLOW_PRIVATE = True
    assert client.post("/login/", {"username": "op", "password": WRONG_PASSWORD}).status_code == 200
    assert client.post("/login/", {"username": "op", "password": PASSWORD}).status_code == 302
    session_id = client.cookies["sessionid"].value
    tenant = Tenant.objects.get(slug="t1")
    _, key = api_key_create(tenant=tenant, user=operator, name="ci")
    api = Client()  # no session: the key alone
    assert api.get("/api/v1/runs", HTTP_AUTHORIZATION=f"Bearer {key}").status_code == 200
    assert api.get("/api/v1/runs", HTTP_AUTHORIZATION=f"Bearer {key}x").status_code == 401
    _, webhook_secret = webhook_endpoint_register(
        tenant=tenant, url="http://127.0.0.1:9/hook?token=receiver-token-42", actor="op"
    )
    run_start(tenant_id="t1", agent="paper-trader", goal="buy 2 ACME", user=operator, run_id="logged")
    worker = Worker(lease_seconds=30)
    while worker.run_once():
        pass
    deliver_due()

    text = captured.getvalue()
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    assert lines, "nothing was logged"
    secrets = {
        "password": PASSWORD,
        "wrong password": WRONG_PASSWORD,
        "session id": session_id,
        "api key": key,
        "api key secret part": key.split("_", 2)[2],  # the secret may itself hold "_"
        "webhook secret": webhook_secret,
        "webhook secret body": webhook_secret.removeprefix("whsec_"),
        "receiver token": "receiver-token-42",
    }
    leaked = {name for name, secret in secrets.items() if secret in text}
    assert not leaked, f"{leaked} in the logs"
    stopped = [line for line in lines if line["msg"].startswith("run stopped")]
    assert len(stopped) == 1
    line = stopped[0]
    assert line["tenant"] == "t1" and line["run"] == "logged" and line["worker"] == worker.owner
    assert len(line["trace"]) == 32 and line["level"] == "INFO" and line["logger"] == "keelgate.worker"
    actions = [line for line in lines if line["msg"].startswith("action ")]
    assert actions and all(
        a["action"] and a["run"] == "logged" and a["trace"] == line["trace"] for a in actions
    )


def test_text_lines_carry_the_same_ids_for_a_person():
    """Development lines read ``... message tenant=t1 run=r1``; JSON lines carry them as fields."""
    record = logging.LogRecord("keelgate.worker", logging.INFO, __file__, 1, "run stopped %s", ("x",), None)
    with log_context(tenant="t1", run="r1", worker="w1"):
        text = TextFormatter().format(record)
        data = json.loads(JsonFormatter().format(record))
    assert text.endswith("run stopped x tenant=t1 run=r1 worker=w1")
    assert data["tenant"] == "t1" and data["run"] == "r1" and data["msg"] == "run stopped x"
    assert "tenant" not in json.loads(JsonFormatter().format(record))  # unbound after the block
