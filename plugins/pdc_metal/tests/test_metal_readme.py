"""The python example of pdc-metal's README runs as written."""

from __future__ import annotations

import re
from pathlib import Path

from metal_support import needs_mlx

pytestmark = needs_mlx

README = Path(__file__).parents[1] / "README.md"


def test_readme_example_runs() -> None:
    blocks = re.findall(r"^```python\n(.*?)^```", README.read_text(), re.MULTILINE | re.DOTALL)
    assert blocks, "the README has a python example"
    for block in blocks:
        exec(compile(block, str(README), "exec"), {"__name__": "readme_example"})
