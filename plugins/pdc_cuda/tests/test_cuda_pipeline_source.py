"""The CUDA C of pipeline stages, rendered and compiled to PTX with NVRTC (no GPU), and
the pipeline benchmark refusing to run without one.

Each place a stage can hold in a pipeline is compiled -- first (input in mapped host
memory, output a link), middle (two links), last (a link in, the host region's output
ring out), with links in device memory (device scope) and in mapped memory (system
scope, stages on different devices) -- for every stage body the GPU tests and the
benchmark use, and the PTX is checked for the scope of each ordered access.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pdc_cuda", reason="pdc-cuda is not installed: pip install -e plugins/pdc_cuda")
import cuda_test_support
from cuda_pipeline_support import REC, SOURCES, STATES
from pdc_cuda._ring_source import (
    RingWiring,
    compile_ring_kernel_ptx,
    render_ring_kernel,
    stage_error_prefix,
)

from pdc_core import PersistentKernel, PersistentPipeline
from pdc_core.backend import LinkedDevice, RingMemory, StageLink

needs_nvrtc = cuda_test_support.needs_nvrtc()
BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"
BENCHMARK = BENCHMARKS / "k2k_pipeline.py"

#: (name, wiring) for every place a stage can hold.
PLACES = [
    ("first", RingWiring("system", "device", True, (0, "a"), sequenced_input=True)),
    ("first, host region without sequence words", RingWiring("system", "device", True, (0, "a"))),
    ("middle", RingWiring("device", "device", True, (1, "b"))),
    ("last", RingWiring("device", "system", False, (2, "c"))),
    ("first, link across devices", RingWiring("system", "system", True, (0, "a"))),
    ("middle, links across devices", RingWiring("system", "system", True, (1, "b"))),
    ("last, link across devices", RingWiring("system", "system", False, (2, "c"))),
]


def load_benchmark(path: Path = BENCHMARK):
    spec = importlib.util.spec_from_file_location(f"pdc_benchmark_{path.stem}", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ordered_accesses(ptx: str) -> set[str]:
    return set(re.findall(r"\b(?:ld|st)\.(?:acquire|release|relaxed)\.(?:sys|gpu|cta)", ptx))


# -- rendering -------------------------------------------------------------------------


def test_a_stage_error_prefix_is_the_reference_devices():
    """The CUDA stage's message prefix is exactly what LinkedDevice writes."""
    kernel = PersistentKernel("o'brien \u00e9", REC, REC, capacity=2)
    pipeline = PersistentPipeline(PersistentKernel("z", REC, REC, capacity=2), kernel)
    host_region = RingMemory.from_buffer(pipeline.kernel.layout)
    region = RingMemory.from_buffer(pipeline.link_layout(1))
    device = LinkedDevice(region, StageLink(pipeline, 1, host_region, host_region), print)
    device.set_error(1, "boom")
    assert region.error_message() == stage_error_prefix(1, kernel.name) + "boom"


def test_the_prefix_is_a_c_string_of_its_utf8_bytes():
    source = render_ring_kernel(SOURCES["twice"], REC, REC, wiring=RingWiring(
        "device", "device", True, (1, 'q"\\?\u00e9')
    ))  # fmt: skip
    line = next(line for line in source.split("\n") if "#define PDC_STAGE_PREFIX" in line)
    literal = line.split(" ", 2)[2]
    assert literal == "\"stage 1 ('q\\042\\134\\134\\077\\303\\251'): \""
    # the C literal decodes to the prefix's UTF-8 bytes
    decoded = re.sub(
        rb"\\([0-7]{3})", lambda m: bytes([int(m.group(1), 8)]), literal[1:-1].encode()
    )
    assert decoded.decode("utf-8") == stage_error_prefix(1, 'q"\\?\u00e9')


def test_a_kernel_of_its_own_has_no_prefix_and_no_link():
    source = render_ring_kernel(SOURCES["twice"], REC, REC)
    assert '#define PDC_STAGE_PREFIX ""' in source
    assert "#define PDC_OUT_LINK 0" in source
    assert "#define PDC_IN_SCOPE cuda::thread_scope_system" in source


def test_bad_wirings_are_refused():
    with pytest.raises(ValueError, match="input_scope must be 'system' or 'device'"):
        RingWiring("global")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="must be a pipeline stage"):
        RingWiring("system", "device", True)


# -- NVRTC -----------------------------------------------------------------------------


@needs_nvrtc
@pytest.mark.parametrize(("place", "wiring"), PLACES, ids=[name for name, _ in PLACES])
def test_every_place_compiles_with_the_scope_of_each_region(place, wiring):
    ptx = compile_ring_kernel_ptx(SOURCES["twice"], REC, REC, wiring=wiring)
    assert ".entry pdc_ring_kernel(" in ptx
    accesses = ordered_accesses(ptx)
    scopes = {"system": "sys", "device": "gpu"}
    inside, outside = scopes[wiring.input_scope], scopes[wiring.output_scope]
    assert f"ld.acquire.{inside}" in accesses  # IN_HEAD, polled
    assert f"st.release.{inside}" in accesses  # IN_TAIL, status words
    assert f"st.release.{outside}" in accesses  # the output ring's head
    if wiring.input_scope == wiring.output_scope == "device":
        assert not any(access.endswith(".sys") for access in accesses)  # no PCIe at all
    # The only fence is the drain re-check's, at the input region's scope.
    assert re.findall(r"\bfence\.[a-z_.]+", ptx) == [f"fence.acq_rel.{inside}"]
    # No read-modify-write on any region (only the block-local shared CAS).
    assert not re.search(r"\batom\.(global|sys|gpu)", ptx)
    assert not re.search(r"\batom\.[a-z.]*(sys|gpu)", ptx)


# A body is the same code in every place (the places differ in the template only, compiled
# above), so each body is compiled once, as a middle stage.
MIDDLE = PLACES[2][1]


@needs_nvrtc
@pytest.mark.parametrize("name", sorted(SOURCES))
def test_every_gpu_test_body_compiles(name):
    ptx = compile_ring_kernel_ptx(SOURCES[name], REC, REC, STATES.get(name), wiring=MIDDLE)
    assert ".entry pdc_ring_kernel(" in ptx


@needs_nvrtc
@pytest.mark.parametrize("sequenced", [False, True])
def test_the_sequence_benchmark_body_compiles_for_both_layouts(sequenced):
    benchmark = load_benchmark(BENCHMARKS / "ring_sequence.py")
    ptx = compile_ring_kernel_ptx(
        benchmark.CUDA_DOUBLE,
        benchmark.REQ,
        benchmark.REQ,
        wiring=RingWiring(sequenced_input=sequenced),
    )
    assert ".entry pdc_ring_kernel(" in ptx


@needs_nvrtc
def test_the_benchmark_stages_compile():
    benchmark = load_benchmark()
    for kernel in benchmark.kernels(16):
        source = kernel.body_for("cuda").source
        ptx = compile_ring_kernel_ptx(
            source, kernel.request_dtype, kernel.reply_dtype, wiring=MIDDLE
        )
        assert ".entry pdc_ring_kernel(" in ptx


# -- the benchmark -----------------------------------------------------------------------


@pytest.mark.parametrize("script", ["k2k_pipeline.py", "ring_sequence.py"])
def test_the_benchmarks_refuse_cuda_without_a_gpu_and_say_why(script):
    from pdc_cuda import CudaBackend

    availability = CudaBackend.availability()
    if availability.available:
        pytest.skip("a CUDA GPU is available here: the refusal cannot be seen")
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), "--backend", "cuda"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "cannot measure on the cuda backend" in done.stderr
    assert availability.reason in done.stderr
    assert done.stdout == ""


def test_the_benchmark_stages_compute_the_same_on_both_backends():
    """The cpu and cuda bodies of each benchmark stage describe the same function."""
    benchmark = load_benchmark()
    x = np.array([0.0, 1.5, -3.0])
    for name, (function, expression) in benchmark.STAGES.items():
        assert np.array_equal(function(x), eval(expression, {"x": x})), name
