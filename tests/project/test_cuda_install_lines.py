"""The offline half of .ci/cuda_install_lines.py (pdc-cuda's CUDA 12 and CUDA 13 lines).

The script itself needs the package index; these tests hold what it decides from the
tree alone: the guide's CUDA 13 line is pdc-cuda's own requirements with the CUDA 12
ones swapped, the plugin README's copy of it agrees, and which CUDA major each
resolved distribution is for.
"""

from __future__ import annotations

import importlib.util
import shlex
import tomllib
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_script() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(
        "cuda_install_lines", ROOT / ".ci" / "cuda_install_lines.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


lines = load_script()


def test_the_default_install_stays_cuda_12() -> None:
    project = tomllib.loads((ROOT / "plugins/pdc_cuda/pyproject.toml").read_text("utf-8"))
    requirements = project["project"]["dependencies"]
    assert "cupy-cuda12x>=14" in requirements
    assert "cuda-bindings>=12.4,<13" in requirements


def test_the_guide_s_cuda_13_line_is_pdc_cuda_s_requirements_for_cuda_13() -> None:
    line, no_deps = lines.documented_cuda13_line(lines.GUIDE.read_text(encoding="utf-8"))
    assert line == lines.expected_cuda13_requirements()
    assert line == [
        "pdc-core>=0.2,<0.3",
        "numpy>=1.26",
        "cupy-cuda13x>=14",
        "cuda-bindings>=13,<14",
    ]
    assert no_deps == ["--no-deps", "pdc-cuda"]
    guide = lines.GUIDE.read_text(encoding="utf-8")
    for addition in lines.CUDA13_OPTIONAL:  # the script resolves what the guide names
        assert f"'{addition}'" in guide, addition


def test_the_plugin_readme_s_cuda_13_line_installs_the_same_from_a_clone() -> None:
    readme = (ROOT / "plugins/pdc_cuda/README.md").read_text(encoding="utf-8")
    commands = [
        shlex.split(line)
        for line in readme.splitlines()
        if line.startswith("pip install") and ("cupy-cuda13x" in line or "--no-deps" in line)
    ]
    assert len(commands) == 2, commands
    first, second = commands
    expected = [r for r in lines.expected_cuda13_requirements() if not r.startswith("pdc-core")]
    assert first[2:] == ["./", "./plugins/pdc_cpu", *expected]
    assert second[2:4] == ["--no-deps", "./plugins/pdc_cuda"]


def test_a_guide_without_the_cuda_13_line_is_refused() -> None:
    with pytest.raises(ValueError, match="no sh block"):
        lines.documented_cuda13_line("# nothing about CUDA 13 here\n")
    with pytest.raises(ValueError, match="not two pip install commands"):
        lines.documented_cuda13_line("In a CUDA 13 environment:\n```sh\npip install x\n```\n")


def test_each_resolved_distribution_is_given_its_cuda_major() -> None:
    majors = lines.cuda_majors(
        {
            "cupy-cuda12x": "14.2.0",
            "cupy-cuda13x": "14.2.0",
            "cuda-bindings": "13.5.0",
            "cuda-toolkit": "12.9.2.0",
            "nvidia-cuda-nvrtc": "13.5.37",
            "nvidia-cuda-nvrtc-cu12": "12.9.86",
            "nvidia-nvjitlink": "13.5.37",
            "numpy": "2.4.6",
            "cuda-pathfinder": "1.9.1",
        }
    )
    assert majors == {
        "cupy-cuda12x": "12",
        "cupy-cuda13x": "13",
        "cuda-bindings": "13",
        "cuda-toolkit": "12",
        "nvidia-cuda-nvrtc": "13",
        "nvidia-cuda-nvrtc-cu12": "12",
        "nvidia-nvjitlink": "13",
    }


@pytest.mark.parametrize(
    ("requirement", "name"),
    [("cuda-bindings>=12.4,<13", "cuda-bindings"), ("numba-cuda[cu13]>=0.30", "numba-cuda")],
)
def test_requirement_names(requirement: str, name: str) -> None:
    assert lines.requirement_name(requirement) == name
