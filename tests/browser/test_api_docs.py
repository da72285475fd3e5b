"""The API docs page works offline: Swagger UI from this site, under the CSP, no errors."""

from __future__ import annotations

import json
import urllib.request

from playwright.sync_api import expect

from . import pages

contexts = pages.contexts


def test_the_docs_page_renders_every_operation_with_nothing_from_another_host(server, contexts):
    """Every operation of /api/v1/openapi.json is listed; no request leaves the site, no CSP
    violation or script error is reported (a CDN would be blocked, and fail the page)."""
    with urllib.request.urlopen(f"{server.url}/api/v1/openapi.json", timeout=10) as response:
        document = json.load(response)
    operations = sum(len(methods) for methods in document["paths"].values())
    context = contexts()
    watched = pages.Watched(context.new_page())
    page = watched.page
    foreign: list[str] = []
    page.on("request", lambda r: foreign.append(r.url) if not r.url.startswith(server.url) else None)
    response = page.goto(f"{server.url}/api/v1/docs")
    assert response is not None and response.status == 200
    assert "script-src 'self'" in response.headers["content-security-policy"]
    expect(page.locator(".opblock")).to_have_count(operations)
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("Keelgate API")
    page.locator(".opblock-summary").first.click()
    expect(page.locator(".opblock-body").first).to_be_visible()
    assert foreign == []
    watched.assert_clean()
