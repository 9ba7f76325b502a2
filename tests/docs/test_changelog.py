"""CHANGELOG.md: Keep a Changelog form, and a section for every distribution's version.

CI runs this with the rest of the suite, so a version bump in any ``pyproject.toml``
(the root's ``pdc-core`` or a plugin's) fails until the changelog has its section.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
CHANGELOG = ROOT / "CHANGELOG.md"
# "## [0.2.0] - 2026-11-23" or "## [Unreleased]"
RELEASE = re.compile(r"^## \[(?P<version>[^\]]+)\](?: - (?P<date>\d{4}-\d{2}-\d{2}))?\s*$")
KINDS = ("Added", "Changed", "Deprecated", "Removed", "Fixed", "Security")


def _version(pyproject: Path) -> str:
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    if "version" in project:
        return str(project["version"])
    # dynamic: hatch reads it from the file [tool.hatch.version] names
    hatch = tomllib.loads(pyproject.read_text(encoding="utf-8"))["tool"]["hatch"]["version"]
    text = (pyproject.parent / hatch["path"]).read_text(encoding="utf-8")
    match = re.search(r"^__version__\s*=\s*[\"']([^\"']+)[\"']", text, re.MULTILINE)
    assert match, f"no __version__ in {hatch['path']}"
    return match[1]


def _sections() -> list[tuple[str, str | None, list[str]]]:
    """(version, date, its ### headings) for each ``## [...]`` heading, in order."""
    sections: list[tuple[str, str | None, list[str]]] = []
    for line in CHANGELOG.read_text(encoding="utf-8").splitlines():
        match = RELEASE.match(line)
        if match:
            sections.append((match["version"], match["date"], []))
        elif line.startswith("## "):
            raise AssertionError(f"a release heading not in the form '## [X.Y.Z] - DATE': {line!r}")
        elif line.startswith("### ") and sections:
            sections[-1][2].append(line[4:].strip())
    return sections


PYPROJECTS = [ROOT / "pyproject.toml", *sorted(ROOT.glob("plugins/*/pyproject.toml"))]


@pytest.mark.parametrize("pyproject", PYPROJECTS, ids=lambda p: str(p.parent.relative_to(ROOT)))
def test_every_distribution_version_has_a_section(pyproject: Path) -> None:
    version = _version(pyproject)
    released = {v: date for v, date, _ in _sections() if v != "Unreleased"}
    assert version in released, (
        f"{pyproject.relative_to(ROOT)} is version {version}, which has no "
        f"'## [{version}] - YYYY-MM-DD' section in CHANGELOG.md"
    )
    assert released[version], f"the section of {version} has no date"


def test_keep_a_changelog_form() -> None:
    sections = _sections()
    assert sections, "CHANGELOG.md has no release sections"
    assert sections[0][0] == "Unreleased", "the first section is [Unreleased]"
    versions = [tuple(int(n) for n in v.split(".")) for v, _, _ in sections[1:]]
    assert versions == sorted(versions, reverse=True), "releases are listed newest first"
    assert len(set(versions)) == len(versions), "a version has two sections"
    dates = [date for _, date, _ in sections[1:]]
    assert dates == sorted(dates, reverse=True), "release dates go back in time"  # type: ignore[type-var]
    for version, _, kinds in sections:
        unknown = [kind for kind in kinds if kind not in KINDS]
        assert not unknown, f"[{version}] has headings Keep a Changelog does not use: {unknown}"
        assert len(set(kinds)) == len(kinds), f"[{version}] repeats a heading: {kinds}"
    assert {"0.1.0", "0.2.0"} <= {v for v, _, _ in sections}
