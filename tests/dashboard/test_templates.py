"""The templates stay readable: no line runs past 160 characters, in templates/ or any app's templates/; and no
comment shows on a page."""

from tests.conftest import ROOT

LIMIT = 160


def template_files():
    roots = [ROOT / "templates", *(p for p in ROOT.glob("*/templates") if p.parent.name != ".venv")]
    return sorted(p for root in roots for p in root.rglob("*.html"))


def test_the_templates_are_found():
    names = {p.relative_to(ROOT).as_posix() for p in template_files()}
    assert {"templates/base.html", "dashboard/templates/dashboard/job.html",
            "campaigns/templates/campaigns/_body.html", "alerts/templates/alerts/_body.html"} <= names


def test_no_template_line_is_longer_than_160_characters():
    long = [f"{p.relative_to(ROOT).as_posix()}:{n}: {len(line)} characters"
            for p in template_files()
            for n, line in enumerate(p.read_text().splitlines(), 1) if len(line) > LIMIT]
    assert long == [], "wrap these at a tag boundary:\n" + "\n".join(long)


def test_no_template_opens_a_one_line_comment_it_does_not_close_on_that_line():
    # Django's {# #} ends on its own line: one left open shows its text on the page. {% comment %} spans lines.
    open_ones = [f"{p.relative_to(ROOT).as_posix()}:{n}" for p in template_files()
                 for n, line in enumerate(p.read_text().splitlines(), 1)
                 if "{#" in line and "#}" not in line[line.index("{#"):]]
    assert open_ones == []


def test_the_fleet_page_shows_no_template_comment(viewer_client):
    html = viewer_client.get("/").content.decode()
    assert "{#" not in html and "#}" not in html and "plotly_deferred" not in html
