"""The GPU check call's pdc commands, run without a GPU on pdc-cuda's host build (issue 45).

On a lent GPU machine the first call is a prepared script (not in this repository) that
installs pdc through a ``.dist-info`` shim and runs these commands of ours from the
repository root, each under a deadline: ``python -m pdc_core info``, ``check --help``,
``check --backend cuda`` (and ``--requests 100`` under compute-sanitizer), ``pytest -m
cuda plugins/pdc_cuda``, ``benchmarks/cuda_ring.py --markdown --json PATH``,
``benchmarks/k2k_pipeline.py`` and ``benchmarks/ring_sequence.py`` with ``--backend cuda
--rounds 3``, and ``pdc demo --backend cuda --messages 100000``.

Here each runs the same way -- a subprocess from the repository root, through the same
kind of shim (``benchmarks/dist_shim.py``) with pdc-cuda's entry point on
``benchmarks/figures_host_plugin.py``, so that ``cuda`` is the host build -- with smaller
counts and a deadline, and must exit as it should and say what it did. ``cuda_ring.py``
measures CuPy and driver launches, so it needs CuPy and a GPU: it must refuse at once,
with its reason and exit status 2. Only what ran is checked, never how long it took.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pdc_cuda", reason="pdc-cuda is not installed: pip install -e plugins/pdc_cuda")
from cuda_test_support import load_benchmark
from pdc_cuda import CudaBackend
from pdc_cuda.testing import (
    HostCudaBackend,
    PlannedBuild,
    kernel_builds,
    pipeline_builds,
    prebuild,
)

ROOT = Path(__file__).resolve().parents[3]
AVAILABILITY = HostCudaBackend.availability()
pytestmark = [
    pytest.mark.cuda_host,
    pytest.mark.skipif(
        not AVAILABILITY.available,
        reason=f"no host build of the ring kernel: {AVAILABILITY.reason}",
    ),
]

#: One line of ``pdc check``: its status, step, time and what it saw.
STEP = re.compile(r"^(?P<status>PASS|FAIL|SKIP)  (?P<name>.+?) +[0-9.]+ ms  (?P<detail>.*)$")
#: Seconds a command may take before it counts as hung (only a hang comes near it).
DEADLINE = 240


def planned_builds() -> list[PlannedBuild]:
    """What the benchmarks compile, rendered as their launches render it:
    k2k_pipeline.py's three stages (as a pipeline and alone) and ring_sequence.py's
    kernel (sequenced and plain slots). pdc check's and pdc demo's kernels, one each,
    are built when the commands reach them (their specs are pdc-core's own)."""
    from pdc_cuda._kernels import compile_options
    from pdc_cuda._persistent import render_kernel
    from pdc_cuda._ring_source import RingWiring

    from pdc_core import PersistentPipeline

    stages = load_benchmark("k2k_pipeline").kernels(1024)
    sequence = load_benchmark("ring_sequence").kernel(1024, False)
    _, plain, extra = render_kernel(sequence, {}, RingWiring(sequenced_input=False))
    return [
        *pipeline_builds(PersistentPipeline(*stages)),
        *(build for stage in stages for build in kernel_builds(stage)),
        *kernel_builds(sequence),
        PlannedBuild(plain, compile_options(extra), what="ring_sequence.py, plain slots"),
    ]


@pytest.fixture(scope="module")
def shim_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of the GPU call's commands: the shim and this tree's sources first
    on ``PYTHONPATH``, pdc-cuda's entry point on the host build, no backend preselected.
    The benchmarks' kernels are built first, on every core (a cold cache, as in CI,
    would build them one by one as the commands reach them)."""
    prebuild(planned_builds())
    entries = load_benchmark("dist_shim").write_shim(
        tmp_path_factory.mktemp("shim"), "figures_host_plugin"
    )
    env = {**os.environ}
    env.pop("PDC_PLUGINS", None)
    env.pop("PDC_BACKEND", None)
    inherited = [env["PYTHONPATH"]] if env.get("PYTHONPATH") else []
    env["PYTHONPATH"] = os.pathsep.join([*entries, str(ROOT / "benchmarks"), *inherited])
    return env


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` from the repository root under :data:`DEADLINE`; a hang fails the
    test with the command and what it printed."""
    command = [sys.executable, *args]
    try:
        return subprocess.run(
            command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=DEADLINE
        )
    except subprocess.TimeoutExpired as hung:
        pytest.fail(f"{' '.join(args)} hung past {DEADLINE} s; it printed:\n{hung.stdout!r}")


def ok(done: subprocess.CompletedProcess[str]) -> str:
    """The command's output, once it exited 0 (else its output and errors, failing)."""
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_info_lists_the_host_build_as_cuda_and_check_help_the_flags(shim_env):
    info = ok(run(shim_env, "-m", "pdc_core", "info"))
    assert "cuda (pdc-cuda) - available: host builds of the ring kernel on CPU threads" in info
    assert "cpu (pdc-cpu) - available" in info
    usage = ok(run(shim_env, "-m", "pdc_core", "check", "--help"))
    assert "--backend NAME" in usage
    assert "--requests N" in usage


def test_pdc_check_passes_every_step_the_host_build_has(shim_env):
    out = ok(run(shim_env, "-m", "pdc_core", "check", "--backend", "cuda", "--requests", "100"))
    *lines, verdict = out.splitlines()
    steps = {found["name"]: found for found in map(STEP.match, lines) if found is not None}
    assert len(steps) == len(lines), out  # one line per step, each saying how it went
    skipped = {name: step["detail"] for name, step in steps.items() if step["status"] != "PASS"}
    assert skipped == {
        "kernel (Python body)": "cuda declares no python_kernels",
        "beside a resident kernel": "not applicable: the host build runs no CuPy op or plain "
        "kernel beside its resident kernels (CPU threads that nothing waits for); on a GPU "
        "both run there",
    }, out
    for name in ("persistent launch", "persistent batch", "persistent stop", "released"):
        assert name in steps, out
    assert steps["round trip (spin)"]["detail"].endswith("over 100 requests")
    assert verdict == "all checks passed"


@pytest.mark.skipif(
    CudaBackend.availability().available, reason="a GPU is here: cuda_ring.py would measure it"
)
def test_cuda_ring_refuses_at_once_without_a_gpu(shim_env, tmp_path):
    figures = tmp_path / "bench.json"
    done = run(shim_env, "benchmarks/cuda_ring.py", "--quick", "--markdown", "--json", str(figures))
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("cuda_ring.py needs an NVIDIA GPU: the cuda backend is "), (
        done.stderr
    )  # the flags parsed: a usage error would print "usage:" instead
    assert "Traceback" not in done.stderr
    assert not figures.exists()


@pytest.mark.parametrize("script", ["k2k_pipeline", "ring_sequence"])
def test_the_pipeline_and_sequence_benchmarks_measure_both_event_loops(shim_env, script):
    flags = ["--rounds", "1", "--requests", "20", "--batch", "256", "--repeat", "1"]
    out = ok(run(shim_env, f"benchmarks/{script}.py", "--backend", "cuda", *flags))
    assert "host build of the CUDA ring kernel (CPU threads)" in out.splitlines()[0]
    rows = [line for line in out.splitlines() if line.startswith("| ")]
    ratio = "links/host" if script == "k2k_pipeline" else "sequenced/plain"
    for loop in ("asyncio", "trio"):
        assert any(
            row.startswith(f"| {loop} | {ratio} (median of per-round ratios) |") for row in rows
        ), out


def test_pdc_demo_streams_every_frame_through_the_cuda_kernel(shim_env):
    out = ok(run(shim_env, "-m", "pdc_core", "demo", "--backend", "cuda", "--messages", "2000"))
    assert "persistent kernel on cuda:0" in out
    assert "2,000 processed / 2,000 sent / 2,000 requested" in out
    assert "exact match" in out
