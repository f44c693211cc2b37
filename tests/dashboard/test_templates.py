"""The templates stay readable: no line runs past 160 characters, in templates/ or any app's templates/."""

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
