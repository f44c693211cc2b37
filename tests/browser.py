"""Playwright driving Debian's Chromium (Playwright's own browser download needs the open internet): its headless
shell (`chromium-headless-shell`, what `make test` installs) where there is one, else a full `chromium`. The shell is
the browser without its windows: a fifth less CPU over the browser tests, and about half the renderer processes (a
full Chromium starts a spare renderer beside each context's page).

One Playwright driver and one Chromium serve every browser test of a test process (`chromium`, a session
fixture in tests/conftest.py); each test gets a browser context of its own (`page`): its own cookies, storage
and cache, as a fresh browser would have, without the second or so a new driver and browser cost each test.

Playwright's sync API runs its event loop in the test's thread, and between its calls the thread counts that
loop as running: async_to_sync (Django's channel layer) and asyncio.run refuse to run there. So the loop is
marked running only while a browser test runs, and left paused between them; other tests never see it.
"""

import asyncio
import functools
import os
import re
import shutil
from pathlib import Path

import pytest

# Chromium 156 gives every new window (a browser context's first page) two WebUI omnibox popups, each a renderer of
# its own that loads a page of Chrome's UI: 0.8 CPU-s a context, as much as a test's own page, and no test looks at
# an address bar.
DISABLED_FEATURES = ["WebUIOmniboxPopup", "WebUIOmniboxAimPopup"]


@functools.cache
def playwright_disabled_features():
    """The features Playwright disables in the Chromium it launches (its chromiumSwitches), read from its driver.
    Chromium reads only the last --disable-features switch, and Playwright's comes before ours: ours must repeat
    its list, or its choices (HttpsUpgrades, PaintHolding, MediaRouter, ...) would be turned back on."""
    import playwright

    bundle = Path(playwright.__file__).parent / "driver" / "package" / "lib" / "coreBundle.js"
    found = re.search(r"\bdisabledFeatures = \[(.*?)\]\.filter\(Boolean\)", bundle.read_text(), re.S)
    names = re.findall(r'"(\w+)"', re.sub(r"//[^\n]*", "", found.group(1))) if found else []
    if not names:
        pytest.fail(f"Playwright's list of disabled Chromium features was not found in {bundle}: tests/browser.py "
                    "reads it to keep it beside its own (a Playwright upgrade moved it)")
    return names


def chromium_flags():
    return ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-features=" + ",".join([*playwright_disabled_features(), *DISABLED_FEATURES])]


def chromium_path():
    path = (os.environ.get("CHROMIUM") or shutil.which("chromium-headless-shell") or shutil.which("chromium")
            or shutil.which("chromium-browser"))
    if not path:
        pytest.fail("Chromium is missing: `make test` installs it (apt-get install chromium-headless-shell), or set "
                    "CHROMIUM=/path")
    return path


class Chromium:
    """One Playwright driver and Chromium for a test process, started at the first browser test."""

    def __init__(self):
        self.manager = self.playwright = self.browser = self.loop = None

    def browser_for_a_test(self):
        """The browser, started (or started again, if it died), with Playwright's loop marked running."""
        if self.playwright is None:
            from playwright.sync_api import sync_playwright

            # The ORM calls tests make between browser steps are plain synchronous ones.
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
            self.manager = sync_playwright()
            self.playwright = self.manager.start()
            self.loop = asyncio._get_running_loop()
        else:
            asyncio._set_running_loop(self.loop)
        if self.browser is None or not self.browser.is_connected():
            self.browser = self.playwright.chromium.launch(executable_path=chromium_path(), args=chromium_flags())
        return self.browser

    def pause(self):
        """Between browser tests: this thread runs no event loop, as for any other test."""
        asyncio._set_running_loop(None)

    def stop(self):
        if self.playwright is None:
            return
        asyncio._set_running_loop(self.loop)
        try:
            if self.browser is not None and self.browser.is_connected():
                self.browser.close()
        finally:
            self.manager.__exit__()
            self.playwright = None


# A full-page screenshot costs Chromium half a second of CPU: on the way out of a browser test one is saved when the
# test failed (what the page showed then), or for every test with YARDSTICK_SCREENSHOTS=all. The shots a test takes
# itself (`shot`, mid-scenario) are always saved. (tests/conftest.py keeps each test's report on it.)
ALL_SCREENSHOTS = os.environ.get("YARDSTICK_SCREENSHOTS") == "all"


@pytest.fixture
def page(chromium, output_dir, request):
    """A fresh Chromium page in a context of its own; on the way out, a screenshot named after the test if it failed
    (test-output/), or always with YARDSTICK_SCREENSHOTS=all."""
    context = chromium.browser_for_a_test().new_context(viewport={"width": 1440, "height": 900})
    try:
        pg = context.new_page()
        pg.set_default_timeout(15000)
        try:
            yield pg
        finally:
            call = getattr(request.node, "report_call", None)
            if ALL_SCREENSHOTS or call is None or call.failed:
                name = request.node.name.replace("/", "_")
                pg.screenshot(path=str(output_dir / f"{name}.png"), full_page=True)
    finally:
        try:
            context.close()
        finally:
            chromium.pause()
