"""pdc-ray's sources and its tests pass ``mypy --strict`` under the project's mypy
configuration (``pyproject.toml``), so CI keeps them clean. About 7 s on 2 cores (a cold
cache of its own)."""

from __future__ import annotations

from pathlib import Path

import pytest

mypy_api = pytest.importorskip(
    "mypy.api", reason="mypy is not installed (pip install mypy) to check pdc-ray's types"
)

PLUGIN = Path(__file__).resolve().parents[1]
ROOT = PLUGIN.parents[1]


def test_sources_and_tests_pass_mypy_strict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)  # the configuration's mypy_path is relative to the root
    stdout, stderr, status = mypy_api.run(
        [
            "--strict",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(tmp_path / "mypy_cache"),
            "--no-color-output",
            str(PLUGIN / "src" / "pdc_ray"),
            str(PLUGIN / "tests"),
        ]
    )
    assert status == 0, f"mypy --strict found problems (status {status}):\n{stdout}{stderr}"
