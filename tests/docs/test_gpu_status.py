"""docs/cuda-backend.md and docs/benchmarks.md tell one story of what ran on a GPU.

docs/benchmarks.md records every GPU run: a section with ``- Date: YYYY-MM-DD``, a
``- Device: NVIDIA <model> ...`` line, ``pdc at commit `<hash>``` and the
commands it ran (```python benchmarks/NAME.py ...```). docs/cuda-backend.md
states the status once, in the quote at its top (``> **Status on a GPU.**``), naming
each run as "on DATE, on an NVIDIA MODEL, at commit `HASH`", and lists what never ran
in its "Never run on a GPU" table, each row with the commit that brought it.

The checks: the status names exactly the runs benchmarks.md records (how many, when,
on what, at which commit); every "GPU run (...)" aside in the README or docs/ gives a
recorded run's date and model; no sentence there says nothing ran at all while a run
is recorded; a benchmark a run recorded is not listed as never run; the status's
never-run commits are rows of the table; and, where git has the history, every commit
of the table came after every recorded run (had it not, that run would have run it).
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
CUDA_PAGE = ROOT / "docs" / "cuda-backend.md"
BENCHMARKS = ROOT / "docs" / "benchmarks.md"

COUNTS = {"never": 0, "once": 1, "twice": 2}
STATUS_RUN = re.compile(
    r"on (?P<date>\d{4}-\d{2}-\d{2}), on an? NVIDIA (?P<model>\S+?), "
    r"at commit `(?P<commit>[0-9a-f]{7,40})`"
)
# Sentences that say no GPU run happened at all (the wording this page once had).
NOTHING_RAN = [
    r"no line of it has run on a GPU",
    r"nothing of [^.]* has been executed on a GPU",
    r"none has been measured",
    r"has never run on a GPU at all",
]


@dataclass(frozen=True)
class Run:
    date: str
    model: str
    commit: str
    commands: frozenset[str]


def _sections(text: str) -> list[str]:
    return re.split(r"^#{2,6} ", text, flags=re.MULTILINE)


def recorded_runs() -> list[Run]:
    """The GPU runs docs/benchmarks.md records, in page order."""
    runs = []
    for section in _sections(BENCHMARKS.read_text(encoding="utf-8")):
        device = re.search(r"^- Device: NVIDIA (\S+)", section, re.MULTILINE)
        if device is None:
            continue
        date = re.search(r"^- Date: (\d{4}-\d{2}-\d{2})", section, re.MULTILINE)
        commit = re.search(r"pdc at commit `([0-9a-f]{7,40})`", section)
        where = f"a GPU run in docs/benchmarks.md (a '- Device: NVIDIA' line): {section[:60]!r}"
        assert date, f"{where} gives '- Date: YYYY-MM-DD'"
        assert commit, f"{where} gives 'pdc at commit `HASH`'"
        commands = frozenset(re.findall(r"`python (benchmarks/\w+\.py)", section))
        runs.append(Run(date[1], device[1].rstrip(","), commit[1], commands))
    return runs


def _status() -> str:
    text = CUDA_PAGE.read_text(encoding="utf-8")
    assert text.count("**Status") == 1, "docs/cuda-backend.md states its status once"
    match = re.search(r"^> \*\*Status on a GPU\.\*\*.*?(?=^[^>])", text, re.MULTILINE | re.DOTALL)
    assert match, "docs/cuda-backend.md opens with a '> **Status on a GPU.**' quote"
    assert match.start() < text.index("\n## "), "the status comes before the first section"
    return " ".join(line.removeprefix(">").strip() for line in match[0].splitlines())


def _never_run_rows() -> list[tuple[str, str]]:
    """(what, commit) for each row of docs/cuda-backend.md's never-run table."""
    text = CUDA_PAGE.read_text(encoding="utf-8")
    section = text[text.index("## Never run on a GPU\n") :]
    section = section[: section.find("\n## ", 1) % (len(section) + 1)]
    rows = re.findall(r"^\| (.+?) \| `([0-9a-f]{7,40})` \|", section, re.MULTILINE)
    assert rows, "the 'Never run on a GPU' section has a table: what | `commit` | ..."
    return rows


def test_benchmarks_record_the_gpu_run() -> None:
    """The record the rest is compared with is there (the page's one run, 2026-11-27)."""
    runs = recorded_runs()
    assert Run("2026-11-27", "H200", "0b92ee2", runs[0].commands) in runs
    assert "benchmarks/cuda_ring.py" in runs[0].commands


def test_the_status_names_every_recorded_run_and_no_other() -> None:
    status = _status()
    runs = recorded_runs()
    count = re.search(r"has (never) run on a GPU|has run on a GPU (once|twice|\d+ times)", status)
    assert count, f"the status says how many times pdc-cuda ran on a GPU: {status!r}"
    said = count[1] or count[2]
    number = COUNTS[said] if said in COUNTS else int(said.split()[0])
    assert number == len(runs), (
        f"the status says {said!r}; docs/benchmarks.md records {len(runs)} GPU run(s)"
    )
    named = {(m["date"], m["model"], m["commit"]) for m in STATUS_RUN.finditer(status)}
    assert named == {(run.date, run.model, run.commit) for run in runs}, (
        "the runs named in the status (on DATE, on an NVIDIA MODEL, at commit `HASH`) "
        "are the runs docs/benchmarks.md records"
    )


PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_gpu_run_aside_is_a_recorded_run(page: Path) -> None:
    runs = {run.date: run for run in recorded_runs()}
    text = " ".join(page.read_text(encoding="utf-8").split())
    asides = re.findall(r"GPU run \(([^)]*\d{4}-\d{2}-\d{2}[^)]*)\)", text)
    assert asides or page != CUDA_PAGE, "cuda-backend.md dates its measured rows"
    for aside in asides:
        dates = re.findall(r"\d{4}-\d{2}-\d{2}", aside)
        assert all(date in runs for date in dates), f"no GPU run recorded on {dates}: {aside!r}"
        run = runs[dates[0]]
        assert run.model in aside, f"the run of {run.date} was on an {run.model}: {aside!r}"
        for commit in re.findall(r"`([0-9a-f]{7,40})`", aside):
            assert commit == run.commit, f"the run of {run.date} was at `{run.commit}`"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_no_sentence_says_nothing_ran(page: Path) -> None:
    if not recorded_runs():
        pytest.skip("no GPU run is recorded: saying so is true")
    text = " ".join(page.read_text(encoding="utf-8").split())
    found = [p for p in NOTHING_RAN if re.search(p, text, re.IGNORECASE)]
    assert found == [], f"{page.name} says no GPU run happened; benchmarks.md records one"


def test_what_a_run_measured_is_not_listed_as_never_run() -> None:
    measured = set().union(*(run.commands for run in recorded_runs()))
    for what, _ in _never_run_rows():
        assert not measured & set(re.findall(r"benchmarks/\w+\.py", what)), what


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)


def test_what_never_ran_came_after_every_run() -> None:
    """Each commit of the never-run table is in the history and is no ancestor of a
    run's commit: had it been, that run would have run it."""
    rows = _never_run_rows()
    status_commits = set(re.findall(r"`([0-9a-f]{7,40})`", _status()))
    runs = recorded_runs()
    assert status_commits - {run.commit for run in runs} <= {commit for _, commit in rows}, (
        "every commit the status says never ran is a row of the never-run table"
    )
    try:
        have_history = _git("cat-file", "-e", f"{runs[0].commit}^{{commit}}").returncode == 0
    except OSError:
        have_history = False
    if not have_history:
        pytest.skip("no git history here (an sdist or a shallow clone): commits unchecked")
    for what, commit in rows:
        assert _git("cat-file", "-e", f"{commit}^{{commit}}").returncode == 0, (
            f"no commit {commit} ({what})"
        )
        for run in runs:
            before = _git("merge-base", "--is-ancestor", commit, run.commit).returncode == 0
            assert not before, f"{what} ({commit}) was in the GPU run of {run.date}"
