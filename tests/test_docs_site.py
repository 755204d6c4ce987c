"""The documentation site (mkdocs.yml): every page of docs/ is in its navigation, and the strict build fails
on what a reader would meet as a dead end (a page outside the navigation, a broken link or anchor, an API
reference to a name the package does not have). `make lint` builds the site itself (docs-check)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def nav_pages(entries) -> set[str]:
    """The pages named anywhere in a mkdocs ``nav`` (strings, {title: page} and {section: [...]})."""
    found: set[str] = set()
    for entry in entries:
        if isinstance(entry, str):
            found.add(entry)
        elif isinstance(entry, dict):
            for value in entry.values():
                found |= nav_pages(value) if isinstance(value, list) else {value}
    return found


def test_every_page_is_in_the_navigation_and_every_entry_is_a_page():
    nav = nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"])
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert pages - nav == set(), "pages of docs/ missing from mkdocs.yml's nav"
    assert nav - pages == set(), "nav entries with no page in docs/"


def test_the_site_has_guides_methods_a_reference_and_reports():
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"]
    sections = [next(iter(e)) for e in nav if isinstance(e, dict)]
    assert sections[1:] == ["Guides", "Methods", "Reference", "Reports"]


def build(site: Path) -> subprocess.CompletedProcess:
    """mkdocs build --strict of a copy of the docs, the configuration and the package in ``site``."""
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site / "out")],
        cwd=site, capture_output=True, text=True, timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip


@pytest.fixture
def site(tmp_path: Path) -> Path:
    shutil.copytree(DOCS, tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    (tmp_path / "src").symlink_to(ROOT / "src")
    return tmp_path


def test_the_strict_build_fails_on_a_page_outside_the_navigation(site: Path):
    (site / "docs" / "orphan.md").write_text("# An orphan\n", encoding="utf-8")
    result = build(site)
    assert result.returncode != 0 and "orphan.md" in result.stderr


def test_the_strict_build_fails_on_a_broken_link_and_a_missing_anchor(site: Path):
    usage = site / "docs" / "usage.md"
    usage.write_text(usage.read_text(encoding="utf-8") + "\n[gone](no_such_page.md)\n", encoding="utf-8")
    result = build(site)
    assert result.returncode != 0 and "no_such_page.md" in result.stderr
    broken = usage.read_text(encoding="utf-8").replace("no_such_page.md", "training.md#no-such-heading")
    usage.write_text(broken, encoding="utf-8")
    result = build(site)
    assert result.returncode != 0 and "no-such-heading" in result.stderr


def test_the_strict_build_fails_on_an_api_reference_to_a_missing_name(site: Path):
    (site / "docs" / "reference" / "encoders.md").write_text(
        "# Encoders\n\n::: sentcl.model.NoSuchEncoder\n", encoding="utf-8"
    )
    result = build(site)
    assert result.returncode != 0 and "NoSuchEncoder" in result.stderr + result.stdout


def test_the_docs_as_they_are_build_strictly(site: Path):
    result = build(site)
    assert result.returncode == 0, result.stderr[-2000:]


# How the project was built is told by its commits and issues, not by its pages: a guide says what the project
# does, a report what was measured (machine, date, commit). These phrases narrate the building.
NARRATION = re.compile(
    r"\bthis session\b|\bearlier session\b|\b(first|second|this|that) session\b|\bissues? \d+|\(issue\b|"
    r"\bthe issue\b|\bissue's\b|\bon main [0-9a-f]{7}|\bReliability (III|IV|V|VI)\b",
    re.IGNORECASE,
)


@pytest.mark.parametrize("page", sorted(DOCS.rglob("*.md")), ids=lambda p: p.relative_to(DOCS).as_posix())
def test_no_page_narrates_how_the_project_was_built(page: Path):
    found = [
        f"{page.relative_to(ROOT)}:{number}: {match.group(0)!r}"
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1)
        for match in [NARRATION.search(line)]
        if match
    ]
    assert found == []


def test_the_domain_guide_is_a_guide():
    """The domain guide stays short enough to read: its measurements live in docs/reports/."""
    assert len((DOCS / "domain.md").read_text(encoding="utf-8").splitlines()) <= 200
