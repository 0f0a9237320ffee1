"""Real-browser tests of the web UI: one headless Chromium per test module, a fresh context per test.

The browser is the distribution's Chromium (`/usr/bin/chromium`, apt package `chromium`, or
`PARTBUILD_CHROMIUM`) driven by Playwright's Python package; `playwright install` is never run, so
nothing is downloaded at run time. Without Chromium the browser tests skip, or fail when
`PARTBUILD_REQUIRE_BROWSER=1` (CI).

Every page a test opens is watched: a console error, an uncaught exception, a Content-Security-Policy
violation (the pages promise no inline scripts or styles) or a JavaScript dialog fails the test at
teardown, unless the test declared that console error expected (`watch.expect(...)`).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

DEFAULT_CHROMIUM = "/usr/bin/chromium"
VIEWPORT = {"width": 1280, "height": 800}
TIMEOUT_MS = 15_000
# --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start; containers often have a
# small /dev/shm, which Chromium would otherwise fill and crash on.
LAUNCH_ARGS = ["--no-sandbox", "--disable-dev-shm-usage"]

# Runs before any page script (injected by the browser, so the page's CSP does not apply to it):
# report each CSP violation as a console error the watcher can tell apart.
_REPORT_CSP = """
document.addEventListener("securitypolicyviolation", function (e) {
  console.error("csp-violation: " + e.violatedDirective + " blocked " + (e.blockedURI || "inline") +
    " at " + e.sourceFile + ":" + e.lineNumber);
});
"""


def chromium_path() -> str | None:
    """The Chromium executable to drive, or None when this machine has none."""
    path = os.environ.get("PARTBUILD_CHROMIUM", DEFAULT_CHROMIUM)
    return path if os.access(path, os.X_OK) else shutil.which("chromium")


# Module scope, not session: while Playwright's sync API is started, its event loop stays marked as
# running in the main thread, so `asyncio.run` fails in every later test of the session
# (tests/orchestrator/delivery/test_sender.py did). Stopping it when the module ends gives the loop back.
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium for a test module (starting it costs about a second)."""
    path = chromium_path()
    if path is None:
        wanted = os.environ.get("PARTBUILD_CHROMIUM", DEFAULT_CHROMIUM)
        reason = f"no Chromium at {wanted} nor on PATH (apt-get install chromium, or set PARTBUILD_CHROMIUM)"
        if os.environ.get("PARTBUILD_REQUIRE_BROWSER") == "1":
            pytest.fail(f"{reason}; PARTBUILD_REQUIRE_BROWSER=1 makes this a failure", pytrace=False)
        pytest.skip(reason)
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=path, headless=True, args=LAUNCH_ARGS)
        expect.set_options(timeout=TIMEOUT_MS)  # a loaded CI machine is slower than expect's 5 s default
        try:
            yield chromium
        finally:
            chromium.close()


@dataclass
class PageWatch:
    """What went wrong in a page's browser: console errors, uncaught exceptions, CSP violations, dialogs."""

    console_errors: list[str] = field(default_factory=list)
    failed_responses: list[str] = field(default_factory=list)  # "status url": names what a console error does not
    page_errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)
    expected: list[re.Pattern[str]] = field(default_factory=list)

    def expect(self, pattern: str) -> None:
        """A console error matching `pattern` is part of the test (e.g. the 403 of a refused form)."""
        self.expected.append(re.compile(pattern))

    @property
    def csp_violations(self) -> list[str]:
        return [text for text in self.console_errors if "csp-violation" in text or "Content Security Policy" in text]

    def problems(self) -> list[str]:
        unexpected = [
            text
            for text in self.console_errors
            # A CSP violation is never expected: the pages promise none.
            if text in self.csp_violations or not any(p.search(text) for p in self.expected)
        ]
        return (
            [f"console error: {t}" for t in unexpected]
            + [f"uncaught exception: {t}" for t in self.page_errors]
            + [f"dialog: {t}" for t in self.dialogs]
            + ([f"responses that failed: {self.failed_responses}"] if unexpected and self.failed_responses else [])
        )

    def attach(self, page: Any) -> None:
        def on_console(message: Any) -> None:
            if message.type == "error":
                where = message.location.get("url", "")
                self.console_errors.append(f"{message.text} ({where})" if where else message.text)

        def on_dialog(dialog: Any) -> None:
            self.dialogs.append(f"{dialog.type}: {dialog.message}")
            dialog.dismiss()

        def on_response(response: Any) -> None:
            if response.status >= 400:
                self.failed_responses.append(f"{response.status} {response.url}")

        page.on("console", on_console)
        page.on("response", on_response)
        page.on("pageerror", lambda error: self.page_errors.append(str(error)))
        page.on("dialog", on_dialog)


@dataclass
class Tab:
    """A page of a fresh browser context, and its watch."""

    page: Any  # playwright.sync_api.Page
    watch: PageWatch


def new_tab(browser: Any, base_url: str) -> tuple[Any, Tab]:
    """A fresh context (no cookies) with one watched page on `base_url`; close the context when done."""
    context = browser.new_context(base_url=base_url, viewport=VIEWPORT)
    context.set_default_timeout(TIMEOUT_MS)
    context.add_init_script(_REPORT_CSP)
    page = context.new_page()
    watch = PageWatch()
    watch.attach(page)
    return context, Tab(page, watch)


@pytest.fixture
def open_tab(browser: Any) -> Iterator[Any]:
    """`open_tab(base_url) -> Tab`: fresh contexts for this test; any page problem fails the test."""
    opened: list[tuple[Any, Tab]] = []

    def open_one(base_url: str) -> Tab:
        opened.append(new_tab(browser, base_url))
        return opened[-1][1]

    yield open_one
    problems = [problem for _, tab in opened for problem in tab.watch.problems()]
    for context, _ in opened:
        context.close()
    assert problems == [], "the browser reported problems:\n" + "\n".join(problems)


def visit(tab: Tab, path: str, status: int = 200) -> Any:
    """Go to `path` and wait until the page is loaded and its scripts ran; returns the response."""
    response = tab.page.goto(path, wait_until="load")
    assert response is not None and response.status == status, (path, response and response.status)
    return response


def mark_document(page: Any) -> None:
    """Set a marker on this document's window: it survives anything but a navigation or reload."""
    page.evaluate("window.__partbuildMarker = 'same-document'")


def same_document(page: Any) -> bool:
    """Whether the document `mark_document` marked is still the one shown."""
    return page.evaluate("window.__partbuildMarker === 'same-document'")  # type: ignore[no-any-return]
