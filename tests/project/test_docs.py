"""Every ``python`` code block in the READMEs (the project's and each plugin's) and in
docs/ is executed.

The blocks of one file run in order in one namespace, so a later block may use what
an earlier one defined. A block preceded by ``<!-- doctest: skip REASON -->`` is
skipped with that reason (for code that needs a GPU, say); ``sh`` and other blocks
are not run.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
DOCUMENTS = [
    ROOT / "README.md",
    *sorted((ROOT / "plugins").glob("*/README.md")),
    *sorted((ROOT / "docs").glob("*.md")),
]
_BLOCK = re.compile(
    r"(?:<!--\s*doctest:\s*skip\s*(?P<reason>[^>]*?)\s*-->\s*\n)?^```python[^\n]*\n(?P<code>.*?)^```",
    re.MULTILINE | re.DOTALL,
)


def _blocks(path: Path) -> list[tuple[int, str, str | None]]:
    text = path.read_text(encoding="utf-8")
    return [
        (text.count("\n", 0, match.start("code")) + 1, match["code"], match["reason"])
        for match in _BLOCK.finditer(text)
    ]


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda path: str(path.relative_to(ROOT)))
def test_code_blocks_run(path: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    blocks = _blocks(path)
    if not blocks:
        pytest.skip(f"{path.name} has no python code blocks")
    monkeypatch.chdir(tmp_path)
    # The plugin guide is built around the example backend in examples/.
    monkeypatch.syspath_prepend(str(ROOT / "examples" / "pdc_example_backend" / "src"))
    namespace: dict[str, object] = {"__name__": f"doc_{path.stem}"}
    ran = 0
    for line, code, skip_reason in blocks:
        if skip_reason is not None:
            continue
        try:
            exec(compile(code, f"{path.name}:{line}", "exec"), namespace)
        except Exception as exc:
            raise AssertionError(f"the code block at {path.name}:{line} failed: {exc!r}") from exc
        ran += 1
    if ran == 0:
        pytest.skip(f"every python block of {path.name} is marked skip")


LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
CODE = re.compile(r"```.*?```|`[^`]*`", re.DOTALL)


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda path: str(path.relative_to(ROOT)))
def test_relative_links_point_at_files_that_exist(path: Path) -> None:
    missing = [
        target
        for target in LINK.findall(CODE.sub("", path.read_text()))
        if "://" not in target
        and not target.startswith("mailto:")
        and not (path.parent / target).exists()
    ]
    assert missing == []


def test_each_readme_example_runs_pasted_alone(tmp_path: Path) -> None:
    """The README's examples are copied one at a time: each has all it imports."""
    import subprocess
    import sys

    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.DOTALL)
    assert blocks
    for block in blocks:
        done = subprocess.run(
            [sys.executable, "-c", block], capture_output=True, text=True, cwd=tmp_path, timeout=120
        )
        assert done.returncode == 0, f"{block}\n{done.stderr}"


# A file named in prose or code: a path with a slash, or a Markdown document by name.
FILE_REFERENCE = re.compile(
    r"(?<![\w/.:*-])((?:\.\./|/)?(?:[\w.-]+/)*[\w.-]+\.(?:md|py|toml|cu|h|cpp|sh|txt|rst|json))\b"
)


def _repository_files() -> list[str]:
    import subprocess

    listed = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return listed or [str(path.relative_to(ROOT)) for path in ROOT.rglob("*") if path.is_file()]


@pytest.mark.parametrize(
    "path",
    [ROOT / "README.pypi.md", *DOCUMENTS],
    ids=lambda path: str(path.relative_to(ROOT)),
)
def test_every_file_a_document_cites_is_in_the_repository(path: Path) -> None:
    """Users have the repository, nothing beside it: a document that names a file (a
    ``design.md``, ``../shared/...``) names one they can open."""
    files = _repository_files()
    names = {Path(name).name for name in files}
    text = path.read_text(encoding="utf-8")
    missing = []
    for match in FILE_REFERENCE.finditer(text):
        cited = match.group(1)
        if "/" not in cited and not cited.endswith(".md"):
            continue  # a bare file name in an example (out.so, pdc_body.cu): not a citation
        found = (
            (path.parent / cited).exists()
            or (ROOT / cited).exists()
            or ("/" not in cited and cited in names)
            or any(name.endswith("/" + cited.removeprefix("./")) for name in files)
        )
        if not found:
            missing.append(cited)
    assert missing == []
    assert "../shared" not in text
    assert "/work/" not in text
