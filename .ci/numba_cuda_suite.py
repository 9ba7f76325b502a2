"""Run numba-cuda's own kernel tests on pdc's cpu backend; compare with the declared differences.

Called by .ci/numba-cuda-suite (which says what it checks). Steps:

1. find the installed numba-cuda's ``numba.cuda.tests.cudapy`` and make its test helpers
   importable (they need ``filecheck``: installed into a temporary directory when
   missing, or taken from ``NUMBA_CUDA_FILECHECK``);
2. in a child interpreter with numba's simulator API (``NUMBA_ENABLE_CUDASIM=1``: host
   arrays for ``cuda.to_device`` and the like) and ``PDC_BACKEND=cpu``, replace
   ``numba.cuda.jit`` by ``pdc_core.cuda.jit`` (the only change), and run the modules
   of ``MODULES`` with unittest, recording each test's outcome; a test whose source
   expects numba's ``TypingError`` is skipped (compile-time typing is out of scope);
3. compare: every test must pass or skip (numba's own ``skip_on_cudasim`` and the like)
   unless .ci/numba-cuda-differences.txt lists it, every listed test must fail, and
   every entry's quoted line must be in the document it names.

Exit status 0 when all of it holds.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DIFFERENCES = ROOT / ".ci" / "numba-cuda-differences.txt"
#: numba-cuda's test helpers import it (FileCheck of PTX, which never runs here).
FILECHECK = "filecheck==1.0.6"
#: The ``cudapy`` modules of the vocabulary pdc_core.cuda claims (docs/guide-kernels.md,
#: "The cuda namespace"): indexing, shared/local/const memory, barriers, atomics, math,
#: intrinsics, argument kinds, globals and closures, launches, errors, and numba's
#: example kernels, and numba.cuda.random's generators called from bodies. Left out:
#: numba's compiler and tooling (caching, debug info, inspection, linking, IR passes,
#: ufuncs/gufuncs), cooperative groups, warp primitives, bfloat16/fp8, and test_print
#: (it runs its kernels in a child interpreter with numba's own jit, not pdc's).
MODULES = (
    "test_alignment",
    "test_array",
    "test_array_args",
    "test_array_methods",
    "test_atomics",
    "test_blackscholes",
    "test_boolean",
    "test_casting",
    "test_complex",
    "test_complex_kernel",
    "test_const_string",
    "test_constmem",
    "test_cuda_jit_no_types",
    "test_datetime",
    "test_enums",
    "test_errors",
    "test_exception",
    "test_flow_control",
    "test_forall",
    "test_freevar",
    "test_frexp_ldexp",
    "test_globals",
    "test_idiv",
    "test_intrinsics",
    "test_iterators",
    "test_lang",
    "test_laplace",
    "test_localmem",
    "test_make_function_to_jit_function",
    "test_mandel",
    "test_math",
    "test_matmul",
    "test_minmax",
    "test_montecarlo",
    "test_nondet",
    "test_operator",
    "test_powi",
    "test_py2_div_issue",
    "test_random",
    "test_record_dtype",
    "test_recursion",
    "test_reduction",
    "test_retrieve_autoconverted_arrays",
    "test_slicing",
    "test_sm",
    "test_sm_creation",
    "test_ssa",
    "test_sync",
    "test_userexc",
    "test_vector_type",
)
#: A run that takes longer has hung (the modules take well under a minute).
TIMEOUT_S = 600
TYPING_SKIP = "skipped: numba's compile-time typing check (out of scope for pdc)"

# The child: numba's simulator API, pdc's jit, unittest over MODULES; one outcome per
# test id ("passed", "failed: <last line>", "skipped: <reason>"); a module that does
# not import is one "failed" entry.
RUNNER = """
import inspect, json, os, sys, traceback, unittest
os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
os.environ["PDC_BACKEND"] = "cpu"
from numba import cuda
import pdc_core.cuda
cuda.jit = pdc_core.cuda.jit  # the only change: numba's decorator swapped for pdc's

outcomes = {}

def typing_check(test):
    method = getattr(test, test._testMethodName, None)
    try:
        return "TypingError" in inspect.getsource(method)
    except (OSError, TypeError):
        return False

class Recorder(unittest.TestResult):
    def last_line(self, test, error):
        lines = traceback.format_exception_only(error[0], error[1])
        return lines[0].strip()[:300] if lines else ""
    def addSuccess(self, test):
        outcomes[test.id()] = "passed"
    def addFailure(self, test, error):
        outcomes[test.id()] = "failed: " + self.last_line(test, error)
    addError = addFailure
    def addSkip(self, test, reason):
        outcomes[test.id()] = "skipped: " + str(reason)
    def addExpectedFailure(self, test, error):
        outcomes[test.id()] = "skipped: an expected failure (numba's own)"
    def addUnexpectedSuccess(self, test):
        outcomes[test.id()] = "passed"

def tests(suite):
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            yield from tests(item)
        else:
            yield item

for module in sys.argv[2:]:
    name = "numba.cuda.tests.cudapy." + module
    try:
        suite = unittest.defaultTestLoader.loadTestsFromName(name)
    except unittest.SkipTest as exc:
        outcomes[name] = "skipped: " + str(exc)
        continue
    except Exception as exc:
        outcomes[name] = f"failed: import: {exc!r}"[:300]
        continue
    for test in tests(suite):
        if typing_check(test):
            outcomes[test.id()] = TYPING_SKIP
        else:
            test.run(Recorder())

with open(sys.argv[1], "w") as file:
    json.dump(outcomes, file, indent=1, sort_keys=True)
""".replace("TYPING_SKIP", repr(TYPING_SKIP))

_ENTRY = re.compile(r'^(?P<test>\S+)\s+(?P<doc>[\w./-]+\.md):\s+"(?P<quote>.+)"$')


def read_differences(path: Path = DIFFERENCES, root: Path = ROOT) -> dict[str, str]:
    """The listed test ids, each with the doc line quoted for it.

    One entry a line: ``test-id  docs/<page>.md: "quoted words of the page"``; lines
    starting with # are comments. Raises SystemExit naming the line when an entry is
    malformed, listed twice, or quotes words its page does not hold (compared with
    runs of whitespace and Markdown's backquotes ignored).
    """
    listed: dict[str, str] = {}
    pages: dict[str, str] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        match = _ENTRY.match(line.strip())
        where = f"{path.name}:{number}"
        if match is None:
            raise SystemExit(f'{where}: not <test id>  <doc>.md: "<quoted words>"')
        test_id, doc, quote = match["test"], match["doc"], match["quote"]
        if test_id in listed:
            raise SystemExit(f"{where}: {test_id} is listed twice")
        if doc not in pages:
            page = root / doc
            if not page.is_file():
                raise SystemExit(f"{where}: {doc} is not a document of the repository")
            pages[doc] = _plain(page.read_text(encoding="utf-8"))
        if _plain(quote) not in pages[doc]:
            raise SystemExit(f"{where}: {doc} does not say {quote!r}")
        listed[test_id] = f"{doc}: {quote}"
    return listed


def _plain(text: str) -> str:
    return " ".join(text.replace("`", "").split())


def compare(outcomes: dict[str, str], listed: dict[str, str]) -> list[str]:
    """The problems: unlisted tests that failed, listed tests that did not fail."""
    problems = [
        f"fails but is not a declared difference: {test_id} ({outcome})"
        for test_id, outcome in sorted(outcomes.items())
        if outcome.startswith("failed") and test_id not in listed
    ]
    problems += [
        f"listed as a difference but {outcomes.get(test_id, 'not run')}: {test_id}"
        for test_id in sorted(listed)
        if not outcomes.get(test_id, "").startswith("failed")
    ]
    return problems


def filecheck_path(work: Path) -> str | None:
    """A directory to put on the path for ``filecheck``, or None when it imports."""
    given = os.environ.get("NUMBA_CUDA_FILECHECK")
    if given:
        return given
    if importlib.util.find_spec("filecheck") is not None:
        return None
    target = work / "filecheck"
    print(f"+ pip install --target <temporary> {FILECHECK}", flush=True)
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target"]
    subprocess.run([*pip, str(target), FILECHECK], check=True)
    return str(target)


def run_tests(work: Path, modules: tuple[str, ...] = MODULES) -> dict[str, str]:
    """Run ``modules`` of numba-cuda's cudapy tests with pdc's jit; each test's outcome."""
    script = work / "run_cudapy.py"
    script.write_text(RUNNER, encoding="utf-8")
    outcomes = work / "outcomes.json"
    extra = filecheck_path(work)
    path = os.pathsep.join(p for p in (extra, os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": path}
    command = [sys.executable, str(script), str(outcomes), *modules]
    print(f"+ numba.cuda.jit = pdc_core.cuda.jit; unittest {' '.join(modules)}", flush=True)
    started = time.monotonic()
    result = subprocess.run(command, env=env, timeout=TIMEOUT_S, capture_output=True, text=True)
    print(f"  ran in {time.monotonic() - started:.1f} s", flush=True)
    if result.returncode or not outcomes.exists():
        print(result.stdout[-5000:], result.stderr[-5000:], sep="\n")
        raise SystemExit(f"the test run failed before recording outcomes ({result.returncode})")
    found: dict[str, str] = json.loads(outcomes.read_text(encoding="utf-8"))
    return found


def main() -> int:
    listed = read_differences()
    if importlib.util.find_spec("numba_cuda") is None:
        raise SystemExit("numba-cuda is not installed: pip install './plugins/pdc_cuda[numba]'")
    with tempfile.TemporaryDirectory(prefix="pdc-numba-cuda-suite.") as name:
        outcomes = run_tests(Path(name))
    passed = sum(outcome == "passed" for outcome in outcomes.values())
    skipped = sum(outcome.startswith("skipped") for outcome in outcomes.values())
    failed = sum(outcome.startswith("failed") for outcome in outcomes.values())
    print(
        f"numba-cuda's cudapy tests ({len(MODULES)} modules) on pdc's cpu backend: "
        f"{passed} passed, {skipped} skipped, {failed} failed; {len(listed)} declared "
        "differences"
    )
    problems = compare(outcomes, listed)
    for problem in problems:
        print(f"  {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
