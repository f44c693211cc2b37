"""Input the database cannot store, in Chromium: the site's 400 page names the parameter (it was a bare 500)."""

import pytest

from tests.browser import page  # noqa: F401 - fixture
from tests.dashboard import builders as b
from tests.dashboard.browser_helpers import log_in, shot, user_in_role

pytestmark = pytest.mark.browser


def test_a_nul_in_a_page_address_shows_what_is_wrong_and_a_way_back(live_server, page, transactional_db,  # noqa: F811
                                                                     django_user_model, output_dir, request):
    b.node("gpu-a")
    user_in_role(django_user_model, "vera", "viewer")
    log_in(page, live_server.url, "vera", "/")

    response = page.goto(f"{live_server.url}/nodes/gpu-a?range=%00")
    assert response.status == 400
    assert page.inner_text("h1") == "Bad request"
    assert page.inner_text("p.error") == ("range contains a NUL (U+0000) character; it must be text without NUL "
                                          "(U+0000) or lone surrogate (U+D800-U+DFFF) characters")
    shot(page, output_dir, request, "nul-in-range")
    page.click("text=the fleet")
    page.wait_for_url(f"{live_server.url}/")
