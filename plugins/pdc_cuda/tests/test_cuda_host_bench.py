"""``pdc bench --backend cuda`` on the host build: what pdc-cuda adds to the bench.

pdc-cuda registers, through ``pdc_register_benchmarks``, the hand-written mapped-memory
floor (8 B, and 4 KiB / 64 KiB read by one thread and by the block), pdc's resident
ring on those payloads held against them and, on a device that launches kernels, the
``cuda.bindings`` pre-packed launch and a CUDA-graph replay (``pdc_cuda._bench``). The
host build (``HostCudaBackend``: the kernels on CPU threads) runs the floors and pdc's
paths, under asyncio and trio (the whole ``pdc bench`` suite with it:
``tests/cli/test_bench_cuda_host.py``); the launch paths need CuPy and a GPU, so here
only their place in the table is checked. Times on the host build say nothing about a
GPU.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

import anyio
import pytest

pytest.importorskip("pdc_cuda", reason="pdc-cuda is not installed: pip install -e plugins/pdc_cuda")
from cuda_test_support import host_build_marks
from pdc_cuda import pdc_register_benchmarks
from pdc_cuda._bench import MappedFloor, benchmark_paths, floor_round_trip
from pdc_cuda.testing import HostCudaBackend, HostStream

from pdc_core import Capability
from pdc_core.backend import BenchmarkPath, BenchmarkPaths

pytestmark = [*host_build_marks(), pytest.mark.anyio]

FLOOR = "mapped-memory floor"
PAYLOAD_PATHS = [
    f"{FLOOR}, 4 KiB, one thread reads it",
    f"{FLOOR}, 4 KiB, the block reads it",
    "resident ring, 4 KiB",
    "resident ring, 4 KiB, spin",
    f"{FLOOR}, 64 KiB, one thread reads it",
    f"{FLOOR}, 64 KiB, the block reads it",
    "resident ring, 64 KiB",
    "resident ring, 64 KiB, spin",
]


class Watched(HostCudaBackend):
    """The host build, keeping every stream it made (the floor kernel's among them)."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.made: list[HostStream] = []

    def create_stream(self) -> HostStream:
        stream = super().create_stream()
        self.made.append(stream)
        return stream


class Launching(HostCudaBackend):
    """The host build declaring that it launches kernels, as a GPU's backend does."""

    capabilities: ClassVar[frozenset[Capability]] = HostCudaBackend.capabilities | {
        Capability.KERNELS
    }


def _registered() -> BenchmarkPaths:
    found: list[tuple[str, BenchmarkPaths, str]] = []
    pdc_register_benchmarks(register=lambda *entry: found.append(entry))
    ((name, paths, _),) = found
    assert name == "cuda"
    return paths


def test_the_cuda_plugin_registers_its_paths_for_pdc_bench() -> None:
    backend = HostCudaBackend(max_threads_per_block=2)
    paths = list(_registered()(backend))  # what pdc bench --backend cuda gets
    assert all(isinstance(path, BenchmarkPath) for path in paths)
    assert [path.label for path in paths] == [FLOOR, *PAYLOAD_PATHS]
    assert [path.label for path in paths if path.resident_baseline] == [FLOOR]
    by_label = {path.label: path for path in paths}
    for size in ("4 KiB", "64 KiB"):
        for path in (f"resident ring, {size}", f"resident ring, {size}, spin"):
            assert by_label[path].baselines == (
                f"{FLOOR}, {size}, the block reads it",
                f"{FLOOR}, {size}, one thread reads it",
            )


def test_on_a_device_that_launches_kernels_the_launch_paths_join() -> None:
    paths = {path.label: path for path in benchmark_paths(Launching(max_threads_per_block=2))}
    resident_baselines = [label for label, path in paths.items() if path.resident_baseline]
    assert resident_baselines == [FLOOR, "cuda.bindings launch", "graph replay"]
    assert paths["resident ring, 64 KiB, spin"].baselines == (
        f"{FLOOR}, 64 KiB, the block reads it",
        f"{FLOOR}, 64 KiB, one thread reads it",
        "cuda.bindings launch, 64 KiB",
        "graph replay, 64 KiB",
    )
    assert not paths["cuda.bindings launch, 4 KiB"].baselines  # a baseline


def test_without_nvidia_s_driver_bindings_the_graph_replay_stays(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pdc_cuda import _bench

    monkeypatch.setattr(_bench, "_DRIVER_MODULES", ("pdc_no_such.driver", "pdc_no_such.cuda"))
    paths = {path.label: path for path in benchmark_paths(Launching(max_threads_per_block=2))}
    assert not any(label.startswith("cuda.bindings") for label in paths)
    assert paths["graph replay"].resident_baseline
    assert paths["resident ring, 4 KiB"].baselines[-1] == "graph replay, 4 KiB"


async def test_every_path_answers_on_the_host_build() -> None:
    for path in benchmark_paths(HostCudaBackend(max_threads_per_block=2)):
        samples = await path.sampler(6, 2)
        assert len(samples) == 6, path.label
        assert all(sample > 0 for sample in samples), path.label


async def test_a_cancelled_floor_stops_its_kernel() -> None:
    backend = Watched(max_threads_per_block=2)
    with anyio.move_on_after(0.3) as scope:
        await floor_round_trip(backend, 4096, True)(10**9, 0)
    assert scope.cancelled_caught
    (stream,) = backend.made
    assert stream.launch is not None
    assert stream.launch.status == 1  # its threads returned and were joined


def test_a_floor_kernel_that_stops_answering_is_an_error_not_a_hang() -> None:
    backend = Watched(max_threads_per_block=2)
    floor = MappedFloor(backend)
    with floor.resident(8, False, 2) as once:
        assert once() > 0
        floor.words[2] = 1  # the kernel leaves its loop: the next request is never answered
        (stream,) = backend.made
        while not stream.done:  # until it has left (else it might still take the request)
            time.sleep(0.001)
        with pytest.raises(RuntimeError, match="the floor kernel stopped without answering"):
            once()
