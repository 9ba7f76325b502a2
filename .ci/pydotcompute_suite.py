"""Run PyDotCompute's own test suite against pdc_core; compare with the deliberate differences.

Called by .ci/pydotcompute-suite (which says what it checks). Steps:

1. get the sdist of PyDotCompute at ``VERSION`` (``pip download`` from the package
   index, or the file named by ``PYDOTCOMPUTE_SDIST``) and unpack it in a temporary
   directory; its package directory is moved out, so no test can import it;
2. rewrite every ``pydotcompute`` in its ``tests/`` to ``pdc_core``;
3. run those tests with this interpreter (pdc_core and pytest-asyncio installed), under
   the sdist's own pytest configuration (``asyncio_mode = "auto"``: its async tests are
   asyncio tests), recording each test's outcome through a small plugin;
4. compare: every test must pass (or skip for want of a GPU, as PyDotCompute's CUDA and
   Metal tests do on PyDotCompute itself) unless .ci/pydotcompute-differences.txt lists
   it, and every listed test must fail;
5. run tests/seed/test_pydotcompute_paths.py with the sdist's source findable (read, not
   imported), so docs/migrating-from-pydotcompute.md's tables are checked against the
   same release.

Exit status 0 when all of it holds.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

VERSION = "0.2.0"
#: What PyDotCompute's suite gives on PyDotCompute itself, without a GPU (measured).
PYDOTCOMPUTE_PASSED = 398
ROOT = Path(__file__).resolve().parents[1]
DIFFERENCES = ROOT / ".ci" / "pydotcompute-differences.txt"
#: The skips its conftest makes without the hardware (as on PyDotCompute itself); a test
#: skipped for another reason is a problem, as a failure is.
HARDWARE_SKIPS = ("skipped: CUDA not available", "skipped: Metal/MLX not available")
#: A test run that takes longer has hung (the whole suite takes seconds).
TIMEOUT_S = 300

# Written next to the tests; pytest loads it with ``-p``. One outcome per test id:
# "failed" when any phase failed (an error in setup or teardown included), else
# "skipped: <reason>" or "passed"; a module that fails to import is one "failed" entry.
RECORDER = """
import json, os

_outcomes = {}

def pytest_runtest_logreport(report):
    previous = _outcomes.get(report.nodeid)
    if report.failed or previous == "failed":
        _outcomes[report.nodeid] = "failed"
    elif report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else ""
        _outcomes[report.nodeid] = "skipped: " + reason.removeprefix("Skipped: ")
    elif report.when == "call":
        _outcomes[report.nodeid] = "passed"

def pytest_collectreport(report):
    if report.failed:
        _outcomes[report.nodeid] = "failed"

def pytest_sessionfinish(session):
    with open(os.environ["PDC_SUITE_OUTCOMES"], "w") as file:
        json.dump(_outcomes, file, indent=1, sort_keys=True)
"""


def read_differences(path: Path = DIFFERENCES) -> dict[str, str]:
    """The listed test ids, each with its reason (``test-id  reason``, one a line)."""
    listed: dict[str, str] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        test_id, _, reason = line.partition(" ")
        if not reason.strip():
            raise SystemExit(f"{path.name}:{number}: {test_id} has no reason")
        if test_id in listed:
            raise SystemExit(f"{path.name}:{number}: {test_id} is listed twice")
        listed[test_id] = reason.strip()
    return listed


def fetch_sdist(work: Path) -> Path:
    """The sdist's path: PYDOTCOMPUTE_SDIST, else downloaded from the package index."""
    given = os.environ.get("PYDOTCOMPUTE_SDIST")
    if given:
        return Path(given)
    spec = f"pydotcompute=={VERSION}"
    print(f"+ pip download --no-deps --no-binary :all: {spec}", flush=True)
    pip = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:"]
    subprocess.run([*pip, "-d", str(work), spec], check=True)
    (sdist,) = work.glob("pydotcompute-*.tar.gz")
    return sdist


def unpack(sdist: Path, work: Path) -> Path:
    """The sdist unpacked under ``work``, its tests rewritten to import pdc_core."""
    with tarfile.open(sdist) as archive:
        archive.extractall(work, filter="data")
    (tree,) = (path for path in work.iterdir() if path.is_dir())
    for path in (tree / "tests").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        path.write_text(re.sub(r"\bpydotcompute\b", "pdc_core", text), encoding="utf-8")
    # Its conftest probes CUDA with CuPy and catches only ImportError, but CuPy without
    # a CUDA driver (installed here by pdc_cuda) raises CUDARuntimeError: widened, so the
    # probe says "no CUDA" and its CUDA tests skip, as on a machine without CuPy.
    conftest = tree / "tests" / "conftest.py"
    text = conftest.read_text(encoding="utf-8")
    probe = "getDeviceCount() > 0\n    except ImportError:"
    if probe not in text:
        raise SystemExit("the sdist's conftest has no CUDA probe to widen: check it")
    conftest.write_text(text.replace(probe, "getDeviceCount() > 0\n    except Exception:"))
    return tree


def _with_callers_path(first: Path) -> str:
    """``first``, then the caller's PYTHONPATH: a worktree that puts its sources there
    (instead of the venv's install) is the pdc_core judged."""
    return os.pathsep.join(filter(None, [str(first), os.environ.get("PYTHONPATH")]))


def run_tests(tree: Path, work: Path) -> dict[str, str]:
    """Run the rewritten tests in ``tree``; each test id's outcome."""
    (work / "_pdc_suite_recorder.py").write_text(RECORDER, encoding="utf-8")
    outcomes = work / "outcomes.json"
    env = {
        **os.environ,
        "PYTHONPATH": _with_callers_path(work),
        "PDC_SUITE_OUTCOMES": str(outcomes),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    command += [
        "-p",
        "_pdc_suite_recorder",
        "-o",
        "addopts=--tb=line",
        "--continue-on-collection-errors",
    ]
    command += ["tests"]
    print(f"+ (in the unpacked sdist) {' '.join(command[2:])}", flush=True)
    started = time.monotonic()
    result = subprocess.run(
        command, cwd=tree, env=env, timeout=TIMEOUT_S, capture_output=True, text=True
    )
    print(f"  ran in {time.monotonic() - started:.1f} s", flush=True)
    if not outcomes.exists():
        print(result.stdout[-5000:], result.stderr[-5000:], sep="\n")
        raise SystemExit("the test run recorded no outcome")
    found: dict[str, str] = json.loads(outcomes.read_text(encoding="utf-8"))
    if result.returncode not in (0, 1):  # 1: some tests failed, which is compared below
        print(result.stdout[-5000:], result.stderr[-5000:], sep="\n")
        raise SystemExit(f"pytest exited with {result.returncode}")
    return found


def compare(outcomes: dict[str, str], listed: dict[str, str]) -> list[str]:
    """The problems: unlisted tests that failed or skipped without a hardware reason,
    listed tests that did not fail."""
    problems = [
        f"fails but is not a listed difference: {test_id}"
        for test_id, outcome in sorted(outcomes.items())
        if outcome == "failed" and test_id not in listed
    ]
    problems += [
        f"{outcome}, which only a missing GPU may cause: {test_id}"
        for test_id, outcome in sorted(outcomes.items())
        if outcome.startswith("skipped") and outcome not in HARDWARE_SKIPS
    ]
    problems += [
        f"listed as a difference but {outcomes.get(test_id, 'not run')}: {test_id}"
        for test_id in sorted(listed)
        if outcomes.get(test_id) != "failed"
    ]
    return problems


def check_migration_guide(source: Path) -> int:
    """tests/seed/test_pydotcompute_paths.py with the sdist's package findable in ``source``."""
    # The test finds the package's files with importlib.util.find_spec and reads them;
    # it never imports PyDotCompute.
    env = {**os.environ, "PYTHONPATH": _with_callers_path(source), "PYTHONDONTWRITEBYTECODE": "1"}
    test = "tests/seed/test_pydotcompute_paths.py"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test]
    print(f"+ PYTHONPATH=<the sdist's source> {' '.join(command[2:])}", flush=True)
    result = subprocess.run(command, cwd=ROOT, env=env, timeout=TIMEOUT_S)
    return result.returncode


def main() -> int:
    listed = read_differences()
    with tempfile.TemporaryDirectory(prefix="pdc-pydotcompute-suite.") as name:
        work = Path(name)
        tree = unpack(fetch_sdist(work), work / "sdist")
        # The package leaves the tree before the tests run there (they must import
        # pdc_core, never PyDotCompute); the migration guide's check reads it.
        source = work / "source"
        source.mkdir()
        (tree / "pydotcompute").rename(source / "pydotcompute")
        outcomes = run_tests(tree, work)
        guide_status = check_migration_guide(source)
    passed = list(outcomes.values()).count("passed")
    skipped = sum(outcome.startswith("skipped") for outcome in outcomes.values())
    failed = sorted(test_id for test_id, outcome in outcomes.items() if outcome == "failed")
    print(
        f"PyDotCompute {VERSION}'s suite on pdc_core: {passed} passed (of the "
        f"{PYDOTCOMPUTE_PASSED} that pass on PyDotCompute), {skipped} skipped, "
        f"{len(failed)} failed; {len(listed)} listed differences"
    )
    problems = compare(outcomes, listed)
    for problem in problems:
        print(f"  {problem}")
    if guide_status:
        problems.append("the migration guide's tables disagree with PyDotCompute")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
