"""Playwright driving Debian's Chromium (Playwright's own browser download needs the open internet)."""

import os
import shutil

import pytest

CHROMIUM_FLAGS = [
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


def chromium_path():
    path = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        pytest.fail("Chromium is missing: `make test` installs it (apt-get install chromium), or set CHROMIUM=/path")
    return path


@pytest.fixture
def page(output_dir, request):
    """A fresh Chromium page; a screenshot named after the test is saved on the way out."""
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop in this thread; the ORM calls the
    # tests make between browser steps are plain synchronous ones.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_FLAGS)
        context = browser.new_context(viewport={"width": 1440, "height": 900})
        pg = context.new_page()
        pg.set_default_timeout(15000)
        try:
            yield pg
        finally:
            name = request.node.name.replace("/", "_")
            pg.screenshot(path=str(output_dir / f"{name}.png"), full_page=True)
            browser.close()
