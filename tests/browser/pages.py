"""What every browser test does with a page: open a context, log in, watch for errors, measure.

Shared by the browser test files; a file uses the ``contexts`` fixture by naming it at
module level (``contexts = pages.contexts``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from .conftest import PASSWORD, Server

__all__ = [
    "CONTRAST",
    "LAPTOP",
    "PHONE",
    "Watched",
    "contexts",
    "contrast",
    "item",
    "log_in",
    "page_width",
]

LAPTOP = {"width": 1366, "height": 900}
PHONE = {"width": 390, "height": 844}


CSP_WATCH = """
document.addEventListener("securitypolicyviolation", (e) => {
  const where = `${e.sourceFile}:${e.lineNumber}`;
  console.error(`CSP violation: ${e.violatedDirective} blocked ${e.blockedURI || "inline"} at ${where}`);
});
"""
"""Every Content-Security-Policy violation said as a console error, so the page's errors
catch it (Chromium's own report of one is not always a console message)."""


class Watched:
    """A page plus everything suspicious it did: console errors (a CSP violation among
    them), uncaught exceptions and dialogs."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        page.add_init_script(CSP_WATCH)
        page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))
        page.on("dialog", self._dialog)

    def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def assert_clean(self) -> None:
        assert self.dialogs == [], self.dialogs
        assert self.errors == [], self.errors


@pytest.fixture
def contexts(browser: Browser) -> Iterator[Any]:
    """``contexts(**options)`` opens a browser context; all are closed after the test."""
    opened: list[BrowserContext] = []

    def open_context(**options: Any) -> BrowserContext:
        context = browser.new_context(viewport=options.pop("viewport", LAPTOP), **options)
        opened.append(context)
        return context

    yield open_context
    for context in opened:
        context.close()


def log_in(context: BrowserContext, server: Server, username: str, *, live: bool = True) -> Watched:
    """Log in through the form; with ``live``, wait until the websocket is connected."""
    watched = Watched(context.new_page())
    page = watched.page
    page.goto(f"{server.url}/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{server.url}/")
    if live:
        expect(page.locator("#live")).to_have_attribute("data-state", "live")
    return watched


def item(page: Page, pk: int, kind: str = "a") -> Any:
    """An inbox card: ``a`` an approval, ``u`` an unknown outcome."""
    return page.locator(f"#item-{kind}-{pk}")


CONTRAST = """
(selector) => {
  const rgb = (text) => text.match(/[0-9.]+/g).slice(0, 3).map(Number);
  const lum = ([r, g, b]) => {
    const f = (c) => { c /= 255; return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
  };
  const el = document.querySelector(selector);
  const style = getComputedStyle(el);
  const [a, b] = [lum(rgb(style.color)), lum(rgb(style.backgroundColor))];
  return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
}
"""
"""Text against its own background (WCAG's ratio); the element must have a background set."""

CONTRAST_ON_BACKDROP = """
(selector) => {
  const rgb = (text) => text.match(/[0-9.]+/g).map(Number);
  const painted = (el) => {
    const c = rgb(getComputedStyle(el).backgroundColor);
    return c.length < 4 || c[3] > 0;
  };
  const lum = ([r, g, b]) => {
    const f = (c) => { c /= 255; return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
  };
  const el = document.querySelector(selector);
  let back = el;
  while (back.parentElement && !painted(back)) back = back.parentElement;
  const [a, b] = [lum(rgb(getComputedStyle(el).color)), lum(rgb(getComputedStyle(back).backgroundColor))];
  return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
}
"""
"""Text against the first ancestor (or itself) that paints a background."""


def contrast(page: Page, selector: str) -> float:
    """The WCAG contrast ratio of the first element matching ``selector`` against what is behind it."""
    return float(page.evaluate(CONTRAST_ON_BACKDROP, selector))


def page_width(page: Page) -> tuple[int, int]:
    """(the document's scroll width, the window's width): equal when nothing scrolls sideways."""
    wide, window = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    return int(wide), int(window)
