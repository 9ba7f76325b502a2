"""Types flow through the public API: ``mypy --strict`` over a user program.

``tests/project/typing/user_program.py`` uses the public API with ``assert_type`` checks. Lines
ending in ``# expect-error: <code>`` must fail with exactly that mypy error code; every
other line must pass. The program is checked as a user would check theirs: strict, with
no project configuration, against ``pdc_core``'s sources and its ``py.typed`` marker.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

mypy_api = pytest.importorskip(
    "mypy.api", reason="mypy is not installed (pip install mypy) to check the public types"
)

ROOT = Path(__file__).parents[2]
PROGRAM = Path(__file__).parent / "typing" / "user_program.py"

_EXPECT = re.compile(r"#\s*expect-error:\s*([a-z0-9-]+)\s*$")
_ERROR = re.compile(
    r"^(?P<path>.+?):(?P<line>\d+): error: (?P<message>.*?)(?:  \[(?P<code>[a-z0-9-]+)\])?$"
)


def _expected() -> dict[int, str]:
    """The marked lines of the program: line number -> expected error code."""
    marks: dict[int, str] = {}
    for number, text in enumerate(PROGRAM.read_text().splitlines(), start=1):
        match = _EXPECT.search(text)
        if match:
            marks[number] = match.group(1)
    return marks


def _run_mypy(tmp_path: Path) -> tuple[str, str, int]:
    config = tmp_path / "mypy.ini"
    # A user's setup, not the project's: strict, nothing else; the sources resolve
    # from src/ (installed or not), and only the program's own errors are reported.
    config.write_text(f"[mypy]\nmypy_path = {ROOT / 'src'}\n")
    return mypy_api.run(
        [
            "--strict",
            "--config-file",
            str(config),
            "--cache-dir",
            str(tmp_path / "mypy_cache"),
            "--follow-imports=silent",
            "--show-error-codes",
            "--no-pretty",
            "--no-color-output",
            "--no-error-summary",
            "--hide-error-context",
            str(PROGRAM),
        ]
    )


def test_user_program_types_check_under_strict(tmp_path: Path) -> None:
    expected = _expected()
    assert len(expected) >= 5, "the program lost its expect-error lines"
    stdout, stderr, status = _run_mypy(tmp_path)
    assert status in (0, 1), f"mypy failed to run (status {status}):\n{stdout}\n{stderr}"

    found: dict[int, set[str]] = {}
    unexpected: list[str] = []
    for line in stdout.splitlines():
        match = _ERROR.match(line)
        if match is None:
            if ": note: " not in line and line.strip():
                unexpected.append(line)
            continue
        if Path(match["path"]).resolve() != PROGRAM.resolve():
            unexpected.append(line)
            continue
        number = int(match["line"])
        code = match["code"] or "<no code>"
        found.setdefault(number, set()).add(code)
        if expected.get(number) != code:
            unexpected.append(line)

    missing = [
        f"line {number}: expected [{code}], got {sorted(found.get(number, set())) or 'none'}"
        for number, code in sorted(expected.items())
        if found.get(number) != {code}
    ]
    assert not unexpected, "errors on lines that must pass:\n" + "\n".join(unexpected)
    assert not missing, "marked lines that did not fail as expected:\n" + "\n".join(missing)
