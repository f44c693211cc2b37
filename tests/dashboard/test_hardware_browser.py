"""The Hardware page in Chromium: a person sees Rubin ranked above the H100 on "arithmetic", then narrows the
page to a team that ran nothing and sees it say so."""

import pytest

from tests.browser import page  # noqa: F401 - fixture
from tests.costs.test_tokens import HOPPER, RUBIN, scene  # noqa: F401 - scene is a fixture
from tests.dashboard import builders as b
from tests.dashboard.browser_helpers import log_in, shot, user_in_role

pytestmark = pytest.mark.browser


def test_a_person_compares_models_within_an_environment_and_filters_by_team(  # noqa: F811
        live_server, page, transactional_db, scene, django_user_model, output_dir, request):
    b.job(name="not-yet", team="vision")  # a team with a job, none charged
    user_in_role(django_user_model, "vera", "viewer")
    log_in(page, live_server.url, "vera", "/hardware")

    rows = page.locator('section[data-env="arithmetic"] tbody tr')
    assert rows.locator("th").all_inner_texts() == [RUBIN, HOPPER]
    assert rows.locator("td.rank").all_inner_texts() == ["1", "2"]
    assert rows.first.locator("td").nth(5).inner_text().startswith("$0.25"), "Rubin's generation $ / 1M tokens"
    assert "fewer than two runs: not ranked" in page.locator('section[data-env="tool-use"] td.rank').inner_text()
    shot(page, output_dir, request, "all-teams")

    page.select_option('select[name="team"]', "vision")
    page.click("text=Apply")
    page.wait_for_url("**team=vision**")
    assert page.locator("#hardware-empty").inner_text().startswith("No runs charged in this period. A run shows here")
    assert page.locator("section[data-env]").count() == 0
    assert "team=vision" in page.get_attribute("#csv-link", "href")
    shot(page, output_dir, request, "team-vision")
