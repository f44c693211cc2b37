"""Log in through the real login page in headless Chromium."""

import pytest

from tests.browser import page  # noqa: F401 - fixture
from tests.dashboard.browser_helpers import PASSWORD, user_in_role
from tests.dashboard.live_stack import live_web  # noqa: F401 - fixture

pytestmark = pytest.mark.browser


def test_a_user_logs_in_through_the_form_and_sees_the_health_header(live_server, page, transactional_db, django_user_model):  # noqa: F811
    from django.contrib.auth.models import Group

    user = django_user_model.objects.create_user("lena", password="a-long-password")
    user.groups.add(Group.objects.get_or_create(name="operator")[0])

    page.goto(live_server.url + "/")
    assert "/accounts/login/" in page.url, "an anonymous visitor is sent to the login page"
    page.fill("#id_username", "lena")
    page.fill("#id_password", "wrong")
    page.click("button[type=submit]")
    assert page.get_by_role("alert").inner_text().startswith("Your username and password didn't match")

    page.fill("#id_username", "lena")
    page.fill("#id_password", "a-long-password")
    page.click("button[type=submit]")
    page.wait_for_url(live_server.url + "/")
    assert page.locator("h1").inner_text() == "Fleet"
    assert "lena" in page.locator(".who").inner_text()
    assert "operator" in page.locator(".role").inner_text()

    # The header shows every part's health once /healthz has answered.
    page.wait_for_selector("#health[data-ok]")
    dots = page.locator("#health .dot")
    assert dots.count() == 5
    for i in range(5):
        dot = dots.nth(i)
        assert dot.get_attribute("class").split()[-1] in ("ok", "bad")
        assert ":" in dot.get_attribute("title"), "each dot says what it found"
    db_dot = page.locator('#health .dot[data-check="database"]')
    assert "ok" in db_dot.get_attribute("class").split()


def test_on_a_web_process_with_the_real_settings_the_form_logs_in_and_returns_to_the_page_asked_for(  # noqa: F811
        live_web, page, django_user_model):
    """Daphne as `up` runs it, with the real password hashers (the other browser tests are logged in by a session
    made for them: tests/dashboard/browser_helpers.log_in)."""
    from django.contrib.auth.hashers import PBKDF2PasswordHasher

    user = user_in_role(django_user_model, "wes", "viewer", subprocess=True)
    page.goto(live_web.url + "/jobs?status=running")
    assert page.url == live_web.url + "/accounts/login/?next=/jobs?status=running"
    page.fill("#id_username", "wes")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(live_web.url + "/jobs?status=running")
    assert page.locator("h1").inner_text() == "Jobs"
    assert "wes" in page.locator(".who").inner_text()
    user.refresh_from_db()
    algorithm, rounds, *_ = user.password.split("$")
    assert (algorithm, int(rounds)) == ("pbkdf2_sha256", PBKDF2PasswordHasher.iterations), "hashed again as set"


def test_a_browser_context_opens_no_page_but_the_tests(page):  # noqa: F811
    """The suite's Chromium keeps Playwright's own feature choices and opens none of Chrome's UI pages beside a test's
    page (each a renderer of its own: the omnibox popups of Chromium 156 cost as much CPU as the page itself)."""
    from tests.browser import DISABLED_FEATURES, chromium_flags, playwright_disabled_features

    page.goto("about:blank")
    session = page.context.browser.new_browser_cdp_session()
    try:
        urls = [t["url"] for t in session.send("Target.getTargets")["targetInfos"]]
    finally:
        session.detach()
    assert [u for u in urls if u.startswith("chrome://")] == [], urls
    flags = [f for f in chromium_flags() if f.startswith("--disable-features=")]
    assert len(flags) == 1, "Chromium reads only the last --disable-features"
    assert {"HttpsUpgrades", "PaintHolding", *DISABLED_FEATURES} <= set(flags[0].split("=", 1)[1].split(","))
    assert "MediaRouter" in playwright_disabled_features()
