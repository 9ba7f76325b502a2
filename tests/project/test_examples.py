"""Smoke tests: every example in examples/ runs, small, under asyncio and trio."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

CASES = {
    "vector_add.py": ["--n", "1000"],
    "streaming_pipeline.py": ["--n", "5000"],
    "pagerank_actor.py": ["--nodes", "200"],
    "batch_processor.py": ["--n", "300"],
    "priority.py": ["--n", "4"],
}


def test_every_example_is_covered() -> None:
    assert {p.name for p in EXAMPLES.glob("*.py")} == set(CASES)


@pytest.mark.parametrize("async_backend", ["asyncio", "trio"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_example_runs(name: str, async_backend: str, capsys: pytest.CaptureFixture[str]) -> None:
    namespace = runpy.run_path(str(EXAMPLES / name), run_name=f"example_{name[:-3]}")
    assert namespace["main"]([*CASES[name], "--async-backend", async_backend]) == 0
    assert capsys.readouterr().out.strip()
