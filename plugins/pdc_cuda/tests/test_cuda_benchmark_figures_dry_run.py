"""``benchmarks/gpu_figures.sh`` without a GPU: ``PDC_FIGURES_HOST=1``, its dry run.

The script is the one call a GPU session makes (docs/benchmarks.md). Here it runs whole
on pdc-cuda's host build, through the shim a bare GPU machine uses (``src/`` on
PYTHONPATH, a ``.dist-info`` per distribution), with the same stages and deadlines:
stage 1 is ``cuda_contexts.py --host`` (every placement, every cell); stage 2 is
``pdc bench --backend cuda`` on the host build; stage 3 is ``cuda_floor.py --host``.
Each stage must end with a line that says how (exit, cut by its deadline, or skipped);
stage 1, first and given most of the budget, must exit 0, and the outputs of the stages
that finished must be there and well-formed. Only what ran is checked, never how long
it took.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pdc_cuda", reason="pdc-cuda is not installed: pip install -e plugins/pdc_cuda")
from cuda_test_support import load_benchmark
from pdc_cuda.testing import HostCudaBackend

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "benchmarks" / "gpu_figures.sh"
AVAILABILITY = HostCudaBackend.availability()
pytestmark = [
    pytest.mark.cuda_host,
    pytest.mark.skipif(
        not AVAILABILITY.available,
        reason=f"no host build of the ring kernel: {AVAILABILITY.reason}",
    ),
]

STAGES = ("contexts", "pdc bench", "cuda_floor")
CONTEXTS = load_benchmark("cuda_contexts")
ENDED = re.compile(
    r"^(?P<stage>contexts|pdc bench|cuda_floor|batched): (?:"
    r"exit (?P<rc>\d+) \(limit \d+ s\)"
    r"|(?P<cut>cut by its deadline) \(exit 1(?:24|37), limit \d+ s\)"
    r"|(?P<skipped>skipped) \(budget spent\))$",
    re.MULTILINE,
)
#: Stage 4, run last: ``cuda_ring.py --batched --host`` (the batched throughput and the
#: host's share of it).
STAGES = (*STAGES, "batched")


def run_script(out: Path, budget: int) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    env = {**os.environ, "OUT": str(out), "PYTHON": sys.executable}
    env.update(PDC_FIGURES_HOST="1", PDC_FIGURES_BUDGET=str(budget))
    env.pop("PDC_PLUGINS", None)
    env.pop("PDC_BACKEND", None)
    done = subprocess.run(
        ["bash", str(SCRIPT)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=budget + 60,
    )
    ends = {match["stage"]: match for match in ENDED.finditer(done.stdout)}
    return done, ends


def test_the_whole_script_runs_on_the_host_build(tmp_path: Path) -> None:
    # Stage 1's host builds made first, outside the script's budget (a cold cache in CI
    # costs g++ time, not what the stage shows); the stage's rig finds them cached.
    CONTEXTS.HostRig(HostCudaBackend(max_threads_per_block=2))
    done, ends = run_script(tmp_path, budget=70)
    assert done.returncode == 0, done.stderr
    assert sorted(ends) == sorted(STAGES), done.stdout  # every stage says how it ended
    versions = (tmp_path / "versions.txt").read_text()
    assert "python " in versions
    assert "numpy " in versions
    assert "PDC_FIGURES_HOST=1" in versions

    log = (tmp_path / "contexts.log").read_text()
    assert ends["contexts"]["rc"] == "0", log
    check_contexts(json.loads((tmp_path / "contexts.json").read_text())["results"], log)

    bench = ends["pdc bench"]
    if bench["rc"] is not None:
        assert bench["rc"] == "0", (tmp_path / "bench_cuda.err").read_text()
        latency = json.loads((tmp_path / "bench_cuda.json").read_text())["latency"]
        for library in ("asyncio", "trio"):
            assert f"{library} / resident ring (cuda)" in latency
            assert latency[f"{library} / mapped-memory floor (cuda)"]["baseline"] is True

    floor = ends["cuda_floor"]
    if floor["rc"] is not None:
        assert floor["rc"] == "0", (tmp_path / "cuda_floor.log").read_text()
        log = (tmp_path / "cuda_floor.log").read_text()
        assert "| 8 B | asyncio | request, wait=spin |" in log
        assert "Python calls per single-record session.request" in log

    batched = ends["batched"]
    if batched["rc"] is not None:
        assert batched["rc"] == "0", (tmp_path / "batched.log").read_text()
        saved = json.loads((tmp_path / "batched.json").read_text())
        for library in ("asyncio", "trio"):
            assert saved["batched_host_ns_per_record"][library]["host_share"] > 0
            assert saved["batched_sequenced_over_plain"][library] > 0
        assert "the host's work in a pass of its own" in (tmp_path / "batched.log").read_text()


def check_contexts(rows: list[dict[str, Any]], log: str) -> None:
    """Stage 1 measured every placement, every cell with its outcome, on the host build."""
    assert [row["placement"] for row in rows] == list(CONTEXTS.PLACEMENTS), log
    for row in rows:
        assert "error" not in row, log
        assert len(row["idle_us"]) == len(row["beside_user_us"]) == 2
        assert row["user_rate_ratio"] is not None
        assert row["answers_after"] is True
        beside = row["beside"]
        assert list(beside) == list(CONTEXTS.OPERATIONS)
        assert beside["cupy first op"] == "not run (no CuPy on the host build)"
        refused = row["placement"] == "shared"  # what would wait for the kernel there
        for name in ("compile + launch", "cudaFreeHost"):
            assert (beside[name] == "refused") if refused else beside[name].endswith(" ms"), log
        assert beside["synchronize"].endswith(" ms"), log
    assert "| placement | launch | idle p50/p99 us |" in log
    assert "### Resident-kernel placements (" in log  # --markdown
    assert "own / shared idle p50: " in log
    assert "green / own idle p50: " in log


def test_a_spent_budget_skips_every_stage_saying_so(tmp_path: Path) -> None:
    # Under 20 s left (budget - 5 s of margin) is too little for any stage.
    done, ends = run_script(tmp_path, budget=20)
    assert done.returncode == 0, done.stderr
    assert {stage: match["skipped"] for stage, match in ends.items()} == dict.fromkeys(
        STAGES, "skipped"
    )
    assert (tmp_path / "versions.txt").exists()
    assert not (tmp_path / "bench_cuda.json").exists()


def test_an_unknown_switch_value_is_refused_before_any_stage(tmp_path: Path) -> None:
    env = {**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable}
    env["PDC_FIGURES_HOST"] = "yes"
    done = subprocess.run(
        ["bash", str(SCRIPT)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "PDC_FIGURES_HOST must be 0 (a GPU run) or 1 (the dry run), not 'yes'" in done.stderr
    assert list(tmp_path.iterdir()) == []  # nothing measured, nothing written
