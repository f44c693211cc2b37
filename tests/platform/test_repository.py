"""A clone of the repository is all a person has: nothing may point outside it."""

import subprocess

from tests.conftest import ROOT, TELEMETRY_DATA

# Text files a contributor or user reads or runs; binary data files are skipped.
TEXT_SUFFIXES = {".py", ".md", ".txt", ".html", ".js", ".css", ".ini", ".cfg", ".toml", ".yml", ".yaml", ""}


def tracked_files():
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [ROOT / line for line in out.splitlines() if line]


def test_the_real_telemetry_files_live_in_the_repository():
    assert TELEMETRY_DATA.resolve().is_relative_to(ROOT.resolve())
    tracked = {p.relative_to(ROOT).as_posix() for p in tracked_files()}
    for name in ("smi_h100_pcie_burst.csv", "smi_a100_pcie_burst.csv", "smi_rtx2070_usage.csv",
                 "dcgm_h100x8_sample.prom", "SOURCES.md"):
        assert f"tests/data/telemetry/{name}" in tracked, name


def test_every_data_file_has_its_source_noted():
    sources = (TELEMETRY_DATA / "SOURCES.md").read_text()
    for path in TELEMETRY_DATA.iterdir():
        if path.name != "SOURCES.md":
            assert f"`{path.name}`" in sources, f"{path.name} has no source in SOURCES.md"


# Spelled in pieces so that this file does not name what it looks for.
BESIDE = ".." + "/shared"
BESIDE_PATH = '"shared" / ' + '"data"'


def test_no_file_points_at_a_folder_beside_the_clone():
    offenders = []
    for path in tracked_files():
        if path.suffix not in TEXT_SUFFIXES or not path.is_file():
            continue
        text = path.read_text(errors="replace")
        if BESIDE in text or BESIDE_PATH in text:
            offenders.append(path.relative_to(ROOT).as_posix())
    assert offenders == []


def test_the_docs_the_readme_names_are_in_the_repository():
    readme = (ROOT / "README.md").read_text()
    assert "docs/architecture.md" in readme and "docs/figures.md" in readme
    assert (ROOT / "docs" / "architecture.md").is_file()
    assert (ROOT / "docs" / "figures.md").is_file()
