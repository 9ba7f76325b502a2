"""``pdc bench --backend cuda`` on the host build of pdc-cuda: the suite as it runs on a
GPU, with the kernels on CPU threads (``pdc_cuda.testing.HostCudaBackend``).

pdc's resident paths are held against the ring's floor and the mapped-memory floor that
pdc-cuda registers (``pdc_register_benchmarks``), and pdc's 4 KiB and 64 KiB requests
against the floors of their size. The host build has no launch paths (they need CuPy
and a GPU); times on it say nothing about a GPU, so only the rows and ratios are checked.
"""

from __future__ import annotations

import pytest

pytest.importorskip("pdc_cuda", reason="pdc-cuda is not installed: pip install -e plugins/pdc_cuda")
from pdc_cuda.testing import HostCudaBackend

from pdc_core._cli._bench import BenchResult, run_suite

AVAILABILITY = HostCudaBackend.availability()
pytestmark = [
    pytest.mark.cuda_host,
    pytest.mark.skipif(
        not AVAILABILITY.available,
        reason=f"no host build of the ring kernel: {AVAILABILITY.reason}",
    ),
]

FLOOR = "mapped-memory floor"


@pytest.mark.parametrize("library", ["asyncio", "trio"])
def test_pdc_bench_with_the_host_build(library: str) -> None:
    pytest.importorskip(library)
    result = run_suite(
        BenchResult(),
        n=10,
        rounds=1,
        warmup=2,
        throughput_n=200,
        async_backends=(library,),
        backend=HostCudaBackend(max_threads_per_block=2),
    )
    payload = result.payload()
    assert payload["settings"]["backend"] == "<HostCudaBackend cuda:0>"
    latency = payload["latency"]
    assert latency[f"{library} / {FLOOR} (cuda)"]["baseline"] is True
    for path in ("resident ring (cuda)", "resident ring (cuda), spin", "resident actor ask (cuda)"):
        entry = latency[f"{library} / {path}"]
        assert entry["p50_vs_ring floor (cuda)"] > 0
        assert entry[f"p50_vs_{FLOOR} (cuda)"] > 0
    for size in ("4 KiB", "64 KiB"):
        for wait in ("", ", spin"):
            entry = latency[f"{library} / resident ring, {size}{wait} (cuda)"]
            assert entry[f"p50_vs_{FLOOR}, {size}, the block reads it (cuda)"] > 0
            assert entry[f"p50_vs_{FLOOR}, {size}, one thread reads it (cuda)"] > 0
    assert not any("launch" in key for key in latency)  # no launch path on the host build
