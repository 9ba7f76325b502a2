"""Run anyio's and trio's own memory-stream tests against pdc's streams; compare.

Called by .ci/stream-suites (which says what it checks). Steps:

1. get the sdists of the installed anyio and trio (``pip download --no-binary :all:
   --no-deps`` of exactly those versions) into a cache directory, so that a rerun is
   offline (``PDC_SDIST_CACHE``, default ``~/.cache/pdc-ci``);
2. copy anyio's ``tests/streams/test_memory.py`` and trio's ``_tests/test_channel.py``
   into a temporary directory, in the package layout they import from, with a conftest
   of their own (the pieces of their suites' conftest that the files use: anyio's loop
   parameters, trio's clock fixture and runner; ``..testing`` is ``trio.testing``); the
   files are unchanged but for the factory: the name ``create_memory_object_stream``
   (``open_memory_channel``) is bound, at the end of the module, to a factory that
   returns pdc's stream;
3. run them once per target: ``mailbox`` (one :class:`pdc_core.Mailbox`, both ends)
   and ``broadcast`` (:func:`pdc_core.create_broadcast_stream`, one subscriber), on
   every loop those suites use (anyio's: asyncio, and trio; uvloop where installed,
   as anyio's own conftest; trio's: trio);
4. compare: every test must pass (or skip for the reasons their own suites skip)
   unless .ci/stream-suites-differences.txt lists it, and every listed test must fail
   (an entry ending in ``[*]`` stands for each loop its test runs on).
   Each entry names the documentation file whose sentence declares the difference and
   quotes that sentence; tests/project/test_stream_suites.py checks the quotes.

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
from importlib.metadata import version
from pathlib import Path

# The outcome recorder pytest loads with ``-p`` (written next to the tests), shared.
from pydotcompute_suite import RECORDER

ROOT = Path(__file__).resolve().parents[1]
DIFFERENCES = ROOT / ".ci" / "stream-suites-differences.txt"
TARGETS = ("mailbox", "broadcast")
#: The suites: (sdist name, the test file in the sdist, the factory's name in it).
SUITES = {
    "anyio": ("anyio", "tests/streams/test_memory.py", "create_memory_object_stream"),
    "trio": ("trio", "src/trio/_tests/test_channel.py", "open_memory_channel"),
}
#: Skips that the suites' own runs make too (a loop that is not installed).
ALLOWED_SKIPS = ("uvloop not available", "winloop not available")
TIMEOUT_S = 120

# The factory a user would pass where anyio's (trio's) is expected. anyio's streams take
# math.inf for "unbounded": a Mailbox's capacity is an int, so it becomes sys.maxsize.
FACTORY = """
import math
import os
import sys

from pdc_core import Mailbox, create_broadcast_stream

TARGET = os.environ["PDC_STREAM_TARGET"]


class Factory:
    def __getitem__(self, item_type):
        return self

    def __call__(self, max_buffer_size=0, item_type=None):
        if TARGET == "mailbox":
            capacity = sys.maxsize if max_buffer_size == math.inf else max_buffer_size
            box = Mailbox(capacity)
            return box, box
        send, subscribe = create_broadcast_stream(max_buffer_size)
        return send, subscribe()


factory = Factory()
"""

ANYIO_CONFTEST = """
import asyncio
import sys

import pytest

asyncio_params = [pytest.param(("asyncio", {"debug": True}), id="asyncio")]
try:
    import uvloop
except ImportError:
    asyncio_params.append(
        pytest.param(
            ("asyncio", {}), marks=pytest.mark.skip(reason="uvloop not available"),
            id="asyncio+uvloop",
        )
    )
else:
    asyncio_params.append(
        pytest.param(("asyncio", {"debug": True, "loop_factory": uvloop.new_event_loop}),
                     id="asyncio+uvloop")
    )
if sys.version_info >= (3, 12):
    def eager_task_loop_factory():
        loop = asyncio.new_event_loop()
        loop.set_task_factory(asyncio.eager_task_factory)
        return loop

    asyncio_params.append(
        pytest.param(("asyncio", {"debug": True, "loop_factory": eager_task_loop_factory}),
                     id="asyncio+eager")
    )


@pytest.fixture(params=[*asyncio_params, pytest.param("trio", id="trio")])
def anyio_backend(request):
    return request.param

"""

TRIO_CONFTEST = """
import inspect

import pytest
from trio.testing import MockClock, trio_test


@pytest.fixture
def mock_clock():
    return MockClock()


@pytest.fixture
def autojump_clock():
    return MockClock(autojump_threshold=0)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    if inspect.iscoroutinefunction(pyfuncitem.obj):
        pyfuncitem.obj = trio_test(pyfuncitem.obj)
"""


def read_differences(path: Path = DIFFERENCES) -> dict[str, tuple[str, str]]:
    """The listed test ids, each with the documentation file and the sentence of it
    that declares the difference (``test-id  file  "sentence"``, one a line)."""
    listed: dict[str, tuple[str, str]] = {}
    pattern = re.compile(r'^(\S+)\s+(\S+)\s+"(.+)"\s*$')
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        match = pattern.match(line)
        if match is None:
            raise SystemExit(f'{path.name}:{number}: not `test-id  doc-file  "sentence"`')
        test_id, doc, sentence = match.groups()
        if test_id in listed:
            raise SystemExit(f"{path.name}:{number}: {test_id} is listed twice")
        listed[test_id] = (doc, sentence)
    return listed


def _listed(test_id: str, listed: dict[str, tuple[str, str]]) -> bool:
    """Whether ``test_id`` is listed: by itself, or by its test's ``[*]`` entry (every
    parametrization: each loop the suite runs on, whichever are installed)."""
    return test_id in listed or f"{test_id.partition('[')[0]}[*]" in listed


def compare(outcomes: dict[str, str], listed: dict[str, tuple[str, str]]) -> list[str]:
    """The problems: unlisted tests that failed, or skipped for a reason their own
    suites do not have; listed tests that did not fail (a ``[*]`` entry: any of its
    parametrizations that ran, or none ran)."""
    problems = [
        f"fails but is not a listed difference: {test_id}"
        for test_id, outcome in sorted(outcomes.items())
        if outcome == "failed" and not _listed(test_id, listed)
    ]
    problems += [
        f"{outcome}, which their own suites do not skip: {test_id}"
        for test_id, outcome in sorted(outcomes.items())
        if outcome.startswith("skipped") and not outcome.endswith(ALLOWED_SKIPS)
    ]
    for entry in sorted(listed):
        if not entry.endswith("[*]"):
            if outcomes.get(entry) != "failed":
                problems.append(
                    f"listed as a difference but {outcomes.get(entry, 'not run')}: {entry}"
                )
            continue
        base = entry.removesuffix("*]")
        ran = {
            test_id: outcome
            for test_id, outcome in outcomes.items()
            if test_id.startswith(base) and not outcome.startswith("skipped")
        }
        if not ran:
            problems.append(f"listed as a difference but not run: {entry}")
        problems += [
            f"listed as a difference but {outcome}: {test_id}"
            for test_id, outcome in sorted(ran.items())
            if outcome != "failed"
        ]
    return problems


def fetch_sdist(name: str) -> Path:
    """The sdist of the installed ``name``, from the cache or the package index."""
    cache = Path(os.environ.get("PDC_SDIST_CACHE", Path.home() / ".cache" / "pdc-ci"))
    wanted = f"{name}-{version(name)}.tar.gz"
    if not (cache / wanted).exists():
        cache.mkdir(parents=True, exist_ok=True)
        spec = f"{name}=={version(name)}"
        print(f"+ pip download --no-deps --no-binary :all: {spec}", flush=True)
        pip = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary"]
        subprocess.run([*pip, ":all:", "-d", str(cache), spec], check=True)
    return cache / wanted


def prepare(suite: str, work: Path) -> Path:
    """``work/<suite>``: the suite's test file, in the package layout it imports from
    (``..conftest``, ``..testing``), with the factory swapped."""
    name, member, factory_name = SUITES[suite]
    sdist = fetch_sdist(name)
    prefix = f"{name}-{version(name)}/"
    with tarfile.open(sdist) as archive:
        source = archive.extractfile(prefix + member)
        assert source is not None
        text = source.read().decode("utf-8")
    text += f"\n\nfrom _pdc_stream_factory import factory as {factory_name}  # noqa\n"
    directory = work / suite
    if suite == "anyio":  # tests/streams/test_memory.py; ..conftest is anyio's tests/
        package = directory / "tests"
        files = {"conftest.py": ANYIO_CONFTEST, "streams/test_memory.py": text}
    else:  # trio/_tests/test_channel.py; ..testing is trio.testing
        package = directory / "trio_suite"
        files = {"testing.py": "from trio.testing import *  # noqa\n"}
        files["_tests/test_channel.py"] = text
        files["_tests/conftest.py"] = TRIO_CONFTEST
    for relative, content in files.items():
        path = package / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
    for folder in {package, *(p.parent for p in package.rglob("*.py"))}:
        (folder / "__init__.py").touch()
    return directory


def start(suite: str, target: str, directory: Path, work: Path) -> subprocess.Popen[str]:
    """Start one suite's run against one target (the four runs go side by side)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(work), os.environ.get("PYTHONPATH", "")]),
        "PDC_SUITE_OUTCOMES": str(work / f"outcomes-{suite}-{target}.json"),
        "PDC_STREAM_TARGET": target,
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    command += ["-p", "_pdc_suite_recorder", "-p", "anyio", "-p", "no:asyncio"]
    command += ["-p", "no:pdc_core.testing.pytest_plugin", "-c", os.devnull]
    command += ["--rootdir", str(directory), "-o", "addopts=--tb=line"]
    if suite == "anyio":
        command += ["-o", "anyio_mode=auto"]  # as in anyio's own configuration
    command += [str(directory)]
    return subprocess.Popen(
        command,
        cwd=directory,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(suite: str, target: str, process: subprocess.Popen[str], work: Path) -> dict[str, str]:
    """Wait for one run; each ``suite/target::test`` id's outcome."""
    output, _ = process.communicate(timeout=TIMEOUT_S)
    outcomes = work / f"outcomes-{suite}-{target}.json"
    if not outcomes.exists() or process.returncode not in (0, 1):
        print(output[-5000:])
        raise SystemExit(f"pytest exited with {process.returncode} and no outcome")
    found: dict[str, str] = json.loads(outcomes.read_text(encoding="utf-8"))
    return {f"{suite}/{target}::{test_id}": outcome for test_id, outcome in found.items()}


def main() -> int:
    listed = read_differences()
    outcomes: dict[str, str] = {}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="pdc-stream-suites.") as name:
        work = Path(name)
        (work / "_pdc_suite_recorder.py").write_text(RECORDER, encoding="utf-8")
        (work / "_pdc_stream_factory.py").write_text(FACTORY, encoding="utf-8")
        runs = []
        for suite in SUITES:
            directory = prepare(suite, work)
            for target in TARGETS:
                runs.append((suite, target, start(suite, target, directory, work)))
        for suite, target, process in runs:
            outcomes.update(finish(suite, target, process, work))
    print(f"+ the four runs took {time.monotonic() - started:.1f} s")
    for suite in SUITES:
        for target in TARGETS:
            mine = [o for t, o in outcomes.items() if t.startswith(f"{suite}/{target}::")]
            print(
                f"{suite} {version(suite)}'s suite on {target}: {mine.count('passed')} passed, "
                f"{mine.count('failed')} failed, "
                f"{sum(o.startswith('skipped') for o in mine)} skipped"
            )
    problems = compare(outcomes, listed)
    print(f"{len(listed)} listed differences; {len(problems)} problems")
    for problem in problems:
        print(f"  {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
