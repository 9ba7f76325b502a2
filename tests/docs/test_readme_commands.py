"""The README's quick test subset names tests that exist.

The README offers ``.venv/bin/python -m pytest tests/...`` as a first look before the
whole suite; a directory renamed or emptied would leave that advice pointing at
nothing, so the path it names must hold test modules.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[2]


def test_the_quick_subset_names_a_directory_of_tests() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    subsets = re.findall(r"`\.venv/bin/python -m pytest (tests/[\w/]+)`", readme)
    assert subsets, "the README offers a quick subset: `.venv/bin/python -m pytest tests/...`"
    for subset in subsets:
        assert sorted((ROOT / subset).rglob("test_*.py")), f"{subset} holds no test modules"
