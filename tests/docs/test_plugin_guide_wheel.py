"""The plugin tutorial's example backend, built from the tutorial's own text, passes the kit.

docs/plugin-tutorial.md shows every file of ``examples/pdc_example_backend`` whole, each
block under a ``<!-- file: PATH -->`` marker. This test

1. checks that the blocks are exactly the files under ``examples/`` (no file left
   out, none different), so the guide and the example cannot drift apart;
2. writes the blocks into an empty directory and builds a wheel from them alone
   (``pip wheel --no-build-isolation``: hatchling from this environment, no network);
3. makes a fresh virtual environment, installs the wheel into it (its dependencies,
   ``pdc-core`` and NumPy, come from this environment, which the fresh one sees
   underneath its own site-packages, as ``--system-site-packages`` would), and
4. runs the guide's conformance tests there under asyncio and trio, with pdc finding
   the backend through the installed wheel's entry point, and ``pdc plugins`` listing
   it.

So a reader who copies the guide gets a plugin that builds, installs and passes.
"""

from __future__ import annotations

import json
import os
import re
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
GUIDE = ROOT / "docs" / "plugin-tutorial.md"
EXAMPLE = Path("examples") / "pdc_example_backend"
FILE_BLOCK = re.compile(
    r"^<!-- file: (?P<path>\S+) -->\n(?:<!--[^\n]*-->\n)*```[a-z]*\n(?P<text>.*?)^```$",
    re.MULTILINE | re.DOTALL,
)
# Files of the example that the guide does not show: not code.
NOT_SHOWN = {"LICENSE"}


def guide_files() -> dict[str, str]:
    """``{path relative to the example: text}`` for every file block of the guide."""
    files: dict[str, str] = {}
    for match in FILE_BLOCK.finditer(GUIDE.read_text(encoding="utf-8")):
        path = Path(match["path"])
        assert path.is_relative_to(EXAMPLE), f"a file block outside {EXAMPLE}: {path}"
        relative = path.relative_to(EXAMPLE).as_posix()
        assert relative not in files, f"the guide shows {path} twice"
        files[relative] = match["text"]
    return files


def example_files() -> dict[str, str]:
    base = ROOT / EXAMPLE
    return {
        path.relative_to(base).as_posix(): path.read_text(encoding="utf-8")
        for path in sorted(base.rglob("*"))
        if path.is_file()
        and "__pycache__" not in path.parts
        and path.relative_to(base).as_posix() not in NOT_SHOWN
    }


def test_the_guide_shows_the_example_backend_verbatim() -> None:
    shown = guide_files()
    actual = example_files()
    assert sorted(shown) == sorted(actual), "the guide's file blocks and the example's files"
    for path, text in actual.items():
        assert shown[path] == text, f"the guide's block for {EXAMPLE / path} differs from the file"


def _run(
    command: list[str], cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, cwd=cwd, env=env)
    assert done.returncode == 0, f"{' '.join(command)}\n{done.stdout}\n{done.stderr}"
    return done


def test_the_guide_builds_installs_and_passes_the_kit(tmp_path: Path) -> None:
    pytest.importorskip("trio")  # the guide's conftest runs the kit under trio too
    if not _has_hatchling():
        pytest.fail("hatchling is needed to build the guide's example: pip install -e '.[test]'")

    # 1. the distribution, from the guide's text alone
    project = tmp_path / "pdc_example_backend"
    for relative, text in guide_files().items():
        target = project / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    dist = tmp_path / "dist"
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
         "--no-index", "--wheel-dir", str(dist), str(project)]
    )  # fmt: skip
    (wheel,) = dist.glob("pdc_example_backend-*.whl")

    # 2. a fresh venv that sees this environment's packages beneath its own
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    purelib = Path(
        _run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]
        ).stdout.strip()
    )
    below = [*site.getsitepackages(), sysconfig.get_path("purelib")]
    (purelib / "_pdc_dev_environment.pth").write_text(
        "".join(f"import site; site.addsitedir({str(p)!r})\n" for p in dict.fromkeys(below)),
        encoding="utf-8",
    )
    # pip resolves the wheel's dependencies (pdc-core, numpy) against what is installed
    _run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-index",
         "--no-input", "--disable-pip-version-check", str(wheel)]
    )  # fmt: skip

    env = {**os.environ, "PDC_PLUGINS": "example"}
    env.pop("PDC_BACKEND", None)
    env.pop("PYTHONPATH", None)
    work = tmp_path / "work"  # outside the repository: nothing imported from the tree
    work.mkdir()

    where = _run(
        [str(python), "-c", "import pdc_example_backend as m; print(m.__file__)"], cwd=work, env=env
    ).stdout.strip()
    assert Path(where).is_relative_to(purelib), f"imported from {where}, not the fresh venv"

    plugins = json.loads(
        _run([str(python), "-m", "pdc_core", "plugins", "--json"], cwd=work, env=env).stdout
    )
    (example,) = [p for p in plugins if p["name"] == "example"]
    assert example["error"] is None
    assert example["version"] == "0.1.0"

    # 3. the guide's own tests: the conformance kit under asyncio and trio
    done = _run(
        [str(python), "-m", "pytest", "-v", "-p", "no:cacheprovider",
         str(project / "tests")],
        cwd=work,
        env=env,
    )  # fmt: skip
    results = re.findall(r"::(\S+) (PASSED|FAILED|ERROR|SKIPPED)", done.stdout)
    passed = [test for test, outcome in results if outcome == "PASSED"]
    assert not [r for r in results if r[1] in ("FAILED", "ERROR")], done.stdout
    assert any("trio" in test for test in passed), done.stdout
    assert any("asyncio" in test for test in passed), done.stdout
    assert any("test_round_trip_copies" in test for test in passed), done.stdout
    assert len(passed) >= 20, done.stdout
    print(len(passed), "passed;", done.stdout.strip().splitlines()[-1])


def _has_hatchling() -> bool:
    import importlib.util

    return importlib.util.find_spec("hatchling") is not None
