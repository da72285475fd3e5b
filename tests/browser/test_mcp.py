"""An MCP call decided in Chromium: the official client's call waits in the inbox, and a
person approves it, denies it, or edits then approves it; the client gets the outcome and
the counting upstream ran it once (or never). A Pydantic AI agent's call (a second client
framework, tests/site/mcp_gateway/_pydantic_ai.py), approved the same way, gets its result."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

import pytest
from playwright.sync_api import expect

from tests.site.mcp_gateway._pydantic_ai import AWAITING, QUEUED, ScriptedModel, run_agent

from . import pages
from .conftest import ROOT, Server
from .pages import log_in

contexts = pages.contexts

UPSTREAM = ROOT / "tests" / "contrib" / "mcp" / "upstream_server.py"
T = TypeVar("T")
POLICY = '[tools.send]\nidempotency_argument = "key"\napproval = true\n'


class Mcp:
    """Upstream ``mail`` of acme (its ``send`` needs approval) and alice's API key."""

    def __init__(self, server: Server, home: Path) -> None:
        self.server = server
        self.ledger = home / "mail.ledger"
        policy = home / "mail.toml"
        policy.write_text(POLICY)
        command = f"{sys.executable} {UPSTREAM} {self.ledger}"
        self.manage(
            "keelgate_mcp_upstream",
            "--tenant",
            "acme",
            "--name",
            "mail",
            "--command",
            command,
            "--policy",
            str(policy),
        )
        self.key = (
            self.manage("create_api_key", "--tenant", "acme", "--user", "alice").strip().splitlines()[-1]
        )

    def manage(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=self.server.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    def executions(self, text: str) -> list[dict[str, Any]]:
        if not self.ledger.exists():
            return []
        lines = [json.loads(line) for line in self.ledger.read_text().splitlines() if line.strip()]
        return [e for e in lines if e["tool"] == "send" and e["arguments"].get("text") == text]

    def call(self, arguments: dict[str, Any]) -> Future[Any]:
        """The official client calls ``mail__send`` in a thread of its own; again while it
        still waits for a person (the same call); the future holds its last result."""

        async def run() -> Any:
            from mcp import ClientSession
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            headers = {"Authorization": f"Bearer {self.key}"}
            for _ in range(5):
                async with (
                    create_mcp_http_client(headers=headers) as http,
                    streamable_http_client(f"{self.server.url}/mcp/", http_client=http) as (read, write),
                    ClientSession(read, write) as session,
                ):
                    await session.initialize()
                    result = await session.call_tool("mail__send", arguments)
                if (result.meta or {}).get("io.keelgate/status") != "awaiting_approval":
                    return result
            return result

        return _in_thread(run)

    def agent_call(self, arguments: dict[str, Any]) -> Future[ScriptedModel]:
        """A Pydantic AI agent whose scripted model calls ``mail__send`` in a thread of its own, and
        again while the result says the call waits or is queued; the future holds the model."""
        model = ScriptedModel([("mail__send", arguments)], again_while=(QUEUED, AWAITING))

        async def run() -> ScriptedModel:
            await run_agent(f"{self.server.url}/mcp/", self.key, model)
            return model

        return _in_thread(run)


def _in_thread(run: Callable[[], Coroutine[Any, Any, T]]) -> Future[T]:
    """``run()`` in an event loop of a thread of its own; the future holds what it returned."""
    future: Future[T] = Future()

    def work() -> None:
        try:
            future.set_result(asyncio.run(run()))
        except BaseException as exc:
            future.set_exception(exc)

    threading.Thread(target=work, daemon=True).start()
    return future


@pytest.fixture(scope="module")
def mcp(server: Server, tmp_path_factory: pytest.TempPathFactory) -> Mcp:
    return Mcp(server, tmp_path_factory.mktemp("mcp"))


def _card(page: Any, text: str) -> Any:
    card = page.locator("article.approval", has_text=text)
    expect(card).to_be_visible(timeout=60_000)
    return card


def _words(result: Any) -> str:
    return " ".join(getattr(c, "text", "") for c in result.content)


def test_an_mcp_call_waits_is_approved_in_the_browser_and_the_client_gets_the_result(
    server: Server, contexts: Any, mcp: Mcp
) -> None:
    """The card names the upstream and the tool's description; Approve: the waiting client
    gets the upstream's result, which ran once."""
    text = f"approve-{uuid.uuid4().hex[:6]}"
    bob = log_in(contexts(), server, "bob")
    pending = mcp.call({"to": "ann", "text": text})
    card = _card(bob.page, text)
    expect(card.locator(".upstream")).to_contain_text("mail")
    expect(card.locator(".upstream")).to_contain_text("Send a message to someone.")
    expect(card).to_contain_text("mail__send")
    assert mcp.executions(text) == []
    card.get_by_role("button", name="Approve", exact=True).click()
    expect(card).to_have_count(0)
    result = pending.result(timeout=120)
    assert not result.is_error, _words(result)
    assert _words(result).startswith("sent #") and "to ann" in _words(result)
    (execution,) = mcp.executions(text)
    assert result.structured_content["key"] == execution["arguments"]["key"]
    bob.assert_clean()


def test_an_mcp_call_denied_in_the_browser_tells_the_client_who_and_why(
    server: Server, contexts: Any, mcp: Mcp
) -> None:
    """Deny with a reason: the client's result is an error naming bob and the reason; nothing ran."""
    text = f"deny-{uuid.uuid4().hex[:6]}"
    bob = log_in(contexts(), server, "bob")
    pending = mcp.call({"to": "ann", "text": text})
    card = _card(bob.page, text)
    card.get_by_label("Reason to deny").fill("not to ann today")
    card.get_by_role("button", name="Deny").click()
    expect(card).to_have_count(0)
    result = pending.result(timeout=120)
    assert result.is_error and "Denied by bob: not to ann today" in _words(result)
    assert mcp.executions(text) == []
    bob.assert_clean()


def test_an_mcp_call_edited_in_the_browser_runs_with_the_edited_arguments_once(
    server: Server, contexts: Any, mcp: Mcp
) -> None:
    """Edit, then approve: the form has the upstream schema's fields (no ``key``); the client
    gets the edited call's result and the upstream ran only the edited call, once."""
    text = f"edit-{uuid.uuid4().hex[:6]}"
    edited = f"{text}-edited"
    bob = log_in(contexts(), server, "bob")
    pending = mcp.call({"to": "ann", "text": text})
    card = _card(bob.page, text)
    card.get_by_text("Edit, then approve").click()
    form = card.locator("form.edit-approve")
    expect(form.locator('[name="arg.key"]')).to_have_count(0)
    expect(form.locator('[name="arg.text"]')).to_have_value(text)
    expect(form.locator('[name="arg.text"]')).to_have_attribute("maxlength", "100")
    form.locator('[name="arg.to"]').fill("bea")
    form.locator('[name="arg.text"]').fill(edited)
    form.get_by_role("button", name="Approve edited").click()
    result = pending.result(timeout=120)
    assert not result.is_error, _words(result)
    assert "to bea" in _words(result)
    assert mcp.executions(text) == []
    (execution,) = mcp.executions(edited)
    assert execution["arguments"]["to"] == "bea"
    bob.assert_clean()


def test_a_pydantic_ai_agents_call_approved_in_the_browser_returns_the_result_run_once(
    server: Server, contexts: Any, mcp: Mcp
) -> None:
    """A second client framework: a Pydantic AI agent's call waits in the inbox and nothing runs;
    bob clicks Approve; the agent's model is handed the upstream's result, which ran once."""
    text = f"pai-approve-{uuid.uuid4().hex[:6]}"
    arguments = {"to": "ann", "text": text}
    bob = log_in(contexts(), server, "bob")
    pending = mcp.agent_call(arguments)
    card = _card(bob.page, text)
    expect(card).to_contain_text("mail__send")
    assert mcp.executions(text) == []
    card.get_by_role("button", name="Approve", exact=True).click()
    expect(card).to_have_count(0)
    model = pending.result(timeout=180)
    assert model.errors == [] and all(call == ("mail__send", arguments) for call in model.calls)
    outcome = model.seen[-1][1]
    (execution,) = mcp.executions(text)
    assert isinstance(outcome, dict) and outcome["key"] == execution["arguments"]["key"], outcome
    bob.assert_clean()
