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
import re

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
    _, key = api_key_create(by="tester", tenant=tenant, user=operator, name="ci")
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


KEY = "kg_0123456789ab_" + "S3cr3t-part_" * 4


@pytest.mark.parametrize(
    ("target", "written"),
    [
        (f"/api/v1/runs?api_key={KEY}", "/api/v1/runs?api_key=[redacted]"),
        ("/runs?status=waiting&Token=t&limit=5", "/runs?status=waiting&Token=[redacted]&limit=5"),
        ("/x?X-Api-Key=1&access_token=2&client_secret=3&sig=4", None),
        ("/x?apikey=1;Password=2&AUTH=3&sessionid=4&signature=5", None),
        (f"/x?q={KEY.replace('_', '%5F')}", "/x?q=[redacted]"),
        (f"/x?{KEY}", "/x?[redacted]"),
        (f"/api/v1/runs/{KEY}/", "/api/v1/runs/[redacted]/"),
        ("/runs/?design=a&assigned=b&kind=run.status", "/runs/?design=a&assigned=b&kind=run.status"),
    ],
)
def test_redact_url_keeps_the_path_and_names_and_drops_credential_values(target, written):
    """Credential names (any case, spelling or encoding) lose their value; other parameters stay."""
    from sitekit.logs import REDACTED, redact_url

    redacted = redact_url(target)
    if written is not None:
        assert redacted == written
    else:
        names = [part.split("=")[0] for part in re.split("[&;]", target.partition("?")[2])]
        assert redacted.count(REDACTED) == len(names) and all(f"{n}=" in redacted for n in names)
    assert "S3cr3t" not in redacted


def test_the_formatters_redact_credentials_in_any_line():
    """A key in a path, an Authorization value of any scheme (or none) and a query: never written."""
    message = (
        f"Not Found: /api/v1/runs/{KEY} GET /a?token=abc123&page=2 "
        "Authorization: Bearer abcdefghijklmnopqrstu, Basic b3BlcmF0b3I6cHc= Authorization=bare-credential-1"
    )
    record = logging.LogRecord("django.request", logging.WARNING, __file__, 1, "%s", (message,), None)
    for formatter in (JsonFormatter(), TextFormatter()):
        text = formatter.format(record)
        for secret in ("S3cr3t", "abc123", "abcdefghijklmnopqrstu", "b3BlcmF0b3I6cHc=", "bare-credential-1"):
            assert secret not in text, (formatter, secret)
        assert "/api/v1/runs/[redacted]" in text and "page=2" in text and "Bearer [redacted]" in text


def test_the_redacting_filter_cleans_lines_a_foreign_formatter_writes():
    """Daphne's root handler (its own format): a key in the message's arguments or in an
    exception is gone before the handler formats the line."""
    from sitekit.logs import RedactingFilter

    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    handler.addFilter(RedactingFilter())
    logger = logging.getLogger("tests.foreign")
    logger.addHandler(handler)
    try:
        try:
            raise ValueError(f"bad target /runs?api_key={KEY}")
        except ValueError:
            logger.error("Exception inside application: %s", f"/runs/{KEY}", exc_info=True)
    finally:
        logger.removeHandler(handler)
    text = out.getvalue()
    assert "S3cr3t" not in text
    assert "Exception inside application: /runs/[redacted]" in text and "api_key=[redacted]" in text
