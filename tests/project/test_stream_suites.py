"""The comparison logic of .ci/stream-suites, on fixtures, and its differences list.

.ci/stream_suites.py runs anyio's and trio's memory-stream tests against pdc's streams
(that needs the sdists: CI does it); here, without them: a listed test must fail, an
unlisted one must pass (or skip only as their own suites do), and every listed entry
quotes a sentence that the documentation file it names really contains.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    ci = str(ROOT / ".ci")
    spec = importlib.util.spec_from_file_location("stream_suites", Path(ci, "stream_suites.py"))
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, ci)  # as when run: it imports its neighbour pydotcompute_suite
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(ci)
    return module


suites = _load()


def _words(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def test_compare_accepts_exactly_the_listed_failures() -> None:
    listed = {"anyio/mailbox::t.py::test_clone[trio]": ("docs/x.md", "No clone.")}
    outcomes = {
        "anyio/mailbox::t.py::test_clone[trio]": "failed",
        "anyio/mailbox::t.py::test_send[trio]": "passed",
        "anyio/mailbox::t.py::test_send[asyncio+uvloop]": "skipped: uvloop not available",
    }
    assert suites.compare(outcomes, listed) == []


def test_compare_reports_each_kind_of_problem() -> None:
    listed = {
        "a::listed_but_passes": ("docs/x.md", "Declared."),
        "a::listed_not_run": ("docs/x.md", "Declared."),
    }
    outcomes = {
        "a::listed_but_passes": "passed",
        "a::unlisted_fails": "failed",
        "a::odd_skip": "skipped: something else",
    }
    problems = suites.compare(outcomes, listed)
    assert problems == [
        "fails but is not a listed difference: a::unlisted_fails",
        "skipped: something else, which their own suites do not skip: a::odd_skip",
        "listed as a difference but passed: a::listed_but_passes",
        "listed as a difference but not run: a::listed_not_run",
    ]


def test_a_star_entry_stands_for_every_loop_its_test_ran_on() -> None:
    listed = {"a::t.py::test_x[*]": ("docs/x.md", "Declared.")}
    every_loop_fails = {
        "a::t.py::test_x[asyncio]": "failed",
        "a::t.py::test_x[asyncio+uvloop]": "skipped: uvloop not available",
        "a::t.py::test_x[trio]": "failed",
    }
    assert suites.compare(every_loop_fails, listed) == []
    one_passes = {**every_loop_fails, "a::t.py::test_x[trio]": "passed"}
    assert suites.compare(one_passes, listed) == [
        "listed as a difference but passed: a::t.py::test_x[trio]"
    ]
    assert suites.compare({}, listed) == ["listed as a difference but not run: a::t.py::test_x[*]"]


def test_read_differences_parses_and_refuses_bad_lines(tmp_path: Path) -> None:
    good = tmp_path / "good.txt"
    good.write_text('# a comment\n\nt::id docs/guide.md "A sentence."\n', encoding="utf-8")
    assert suites.read_differences(good) == {"t::id": ("docs/guide.md", "A sentence.")}
    unquoted = tmp_path / "unquoted.txt"
    unquoted.write_text("t::id docs/guide.md a reason without quotes\n", encoding="utf-8")
    with pytest.raises(SystemExit, match=r"unquoted\.txt:1"):
        suites.read_differences(unquoted)
    twice = tmp_path / "twice.txt"
    twice.write_text('t::id d.md "A."\nt::id d.md "B."\n', encoding="utf-8")
    with pytest.raises(SystemExit, match="listed twice"):
        suites.read_differences(twice)


def test_every_listed_difference_quotes_its_documentation() -> None:
    listed = suites.read_differences()
    assert listed, "the differences list is empty"
    for test_id, (doc, sentence) in listed.items():
        assert test_id.split("::")[0] in {
            f"{suite}/{target}" for suite in suites.SUITES for target in suites.TARGETS
        }, test_id
        text = _words((ROOT / doc).read_text(encoding="utf-8"))
        assert _words(sentence) in text, f"{test_id}: {doc} does not say {sentence!r}"
