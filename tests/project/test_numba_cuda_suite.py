"""The comparison logic of .ci/numba-cuda-suite (numba-cuda's own tests on pdc's cpu backend).

The step itself runs in CI (.ci/run); these tests hold what decides its verdict: the
declared-differences file's format and quotes, and the comparison with the outcomes.
"""

from __future__ import annotations

import importlib.util
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_suite() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(
        "numba_cuda_suite", ROOT / ".ci" / "numba_cuda_suite.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


suite = load_suite()


def write(tmp_path: Path, differences: str) -> Path:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text(
        "Streams are `pdc`'s:\na kernel takes a\n  pdc stream.\n", encoding="utf-8"
    )
    path = tmp_path / "differences.txt"
    path.write_text(differences, encoding="utf-8")
    return path


def test_entries_quote_their_document(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "# a comment\n\n"
        'mod.Test.test_a  docs/page.md: "Streams are pdc\'s: a kernel takes a pdc stream."\n'
        'mod.Test.test_b  docs/page.md: "a kernel takes"\n',
    )
    listed = suite.read_differences(path, root=tmp_path)
    assert list(listed) == ["mod.Test.test_a", "mod.Test.test_b"]
    assert listed["mod.Test.test_b"] == "docs/page.md: a kernel takes"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("mod.Test.test_a no quote", "not <test id>"),
        ('mod.Test.test_a  docs/page.md: "words the page lacks"', "does not say"),
        ('mod.Test.test_a  docs/missing.md: "a kernel"', "is not a document"),
        (
            'mod.Test.test_a  docs/page.md: "a kernel"\nmod.Test.test_a  docs/page.md: "a kernel"',
            "listed twice",
        ),
    ],
)
def test_bad_entries_are_refused_naming_the_line(tmp_path: Path, line: str, message: str) -> None:
    path = write(tmp_path, line + "\n")
    with pytest.raises(SystemExit, match=f"differences.txt:[12]: .*{message}"):
        suite.read_differences(path, root=tmp_path)


def test_compare_reports_unlisted_failures_and_listed_passes() -> None:
    outcomes = {
        "a": "passed",
        "b": "failed: TypeError: x",
        "c": "skipped: needs a GPU",
        "d": "failed: AssertionError",
        "e": "passed",
    }
    listed = {"d": "docs/page.md: why", "e": "docs/page.md: why", "f": "docs/page.md: why"}
    assert suite.compare(outcomes, listed) == [
        "fails but is not a declared difference: b (failed: TypeError: x)",
        "listed as a difference but passed: e",
        "listed as a difference but not run: f",
    ]
    assert suite.compare({"d": "failed: x"}, {"d": "docs/page.md: why"}) == []


def test_the_declared_differences_hold_against_the_docs() -> None:
    listed = suite.read_differences()
    assert listed, "the step declares its differences"
    modules = {test_id.split(".")[4] for test_id in listed}
    assert modules <= set(suite.MODULES)


def test_the_child_script_is_python() -> None:
    compile(suite.RUNNER, "run_cudapy.py", "exec")
    assert "cuda.jit = pdc_core.cuda.jit" in suite.RUNNER
    assert repr(suite.TYPING_SKIP) in suite.RUNNER
