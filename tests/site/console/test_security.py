"""Untrusted text stays text; headers, templates and deployment settings stay strict."""

from __future__ import annotations

import base64
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import XSS_IMG, XSS_JS_URL, XSS_SCRIPT, write_hostile_run

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[3]


def _assert_inert(html: str) -> None:
    """No payload survives as markup: scripts, handlers and javascript: links are text only."""
    assert "<script>window.__xss" not in html
    assert "<img" not in html  # the console uses no images: any <img is a payload
    assert not re.search(r"<[^>]*\son\w+\s*=", html, re.IGNORECASE)  # no event-handler attribute at all
    assert not re.search(r"""(href|src|action)\s*=\s*["']?\s*javascript:""", html, re.IGNORECASE)
    assert "</pre><b>" not in html


@pytest.mark.parametrize("url", ["/", "/runs/", "/runs/t1/evil/", "/runs/t1/evil/status/", "/audit/t1/"])
def test_hostile_arguments_and_outputs_are_escaped_everywhere(people, url, as_user):
    """Script, onerror and javascript: payloads in goal, arguments, output, verdicts stay inert text."""
    write_hostile_run()
    response = as_user("op").get(url)
    html = response.content.decode()
    assert response.status_code == 200
    _assert_inert(html)
    if url in ("/", "/runs/t1/evil/"):
        assert "&lt;script&gt;window.__xss=1" in html
        assert "&lt;img src=x onerror=" in html
        assert "javascript:alert" in html  # shown, but never as a link


def test_the_hostile_run_is_in_the_inbox_as_text(people, as_user):
    """The hostile approval and unknown outcome are listed, their arguments escaped JSON."""
    write_hostile_run()
    html = as_user("op").get("/").content.decode()
    assert html.count('class="item approval') == 1 and html.count('class="item unknown') == 1
    assert XSS_SCRIPT not in html and XSS_IMG not in html
    assert XSS_JS_URL.replace("'", "&#x27;") in html  # shown as text, never as a link


def test_pages_send_a_strict_content_security_policy_and_no_store(people, as_user):
    """No inline script can run even if escaping failed; pages with tool output are not cached."""
    for url in ["/", "/runs/", "/audit/t1/", "/login/"]:
        response = as_user("op").get(url) if url != "/login/" else as_user("op").get(url, follow=True)
        policy = response.headers["Content-Security-Policy"]
        assert "script-src 'self'" in policy and "'unsafe-inline'" not in policy, url
        assert "frame-ancestors 'none'" in policy and "object-src 'none'" in policy
        assert "no-store" in response.headers["Cache-Control"]
        assert response.headers["X-Frame-Options"] == "DENY"


def test_no_template_or_console_module_turns_escaping_off():
    """No |safe, safeseq, autoescape off or mark_safe anywhere in the console's code."""
    files = list((ROOT / "templates").rglob("*.html"))
    files += [
        ROOT / p for p in ["approvals/views.py", "approvals/consumers.py", "runs/views.py", "audit/views.py"]
    ]
    files += [
        ROOT / "tenants/views.py",
        ROOT / "sitekit/pages.py",
        ROOT / "sitekit/console_errors.py",
        ROOT / "approvals/cards.py",
        ROOT / "approvals/forms.py",
        ROOT / "approvals/templatetags/console.py",
    ]
    for path in files:
        text = path.read_text()
        for needle in ["|safe", "safeseq", "autoescape off", "mark_safe", "format_html("]:
            assert needle not in text, f"{needle} in {path}"
    js = (ROOT / "static/console/console.js").read_text()
    assert "innerHTML" not in js and "eval(" not in js and "insertAdjacentHTML" not in js


def test_check_deploy_is_clean_with_production_settings(tmp_path):
    """manage.py check --deploy reports nothing with KEELGATE_DEBUG=0 and the required variables."""
    env = dict(os.environ)
    env.update(
        {
            "KEELGATE_DEBUG": "0",
            "KEELGATE_SECRET_KEY": base64.b64encode(os.urandom(48)).decode(),
            "KEELGATE_AUDIT_SIGNING_KEY": base64.b64encode(os.urandom(32)).decode(),
            "KEELGATE_ALLOWED_HOSTS": "console.example.com",
            "KEELGATE_VAR_DIR": str(tmp_path),
        }
    )
    env.pop("DATABASE_URL", None)
    # An in-process worker of an earlier test sets this for itself; a deployment must not.
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout
