"""Every CUDA source the GPU tests and the benchmark run, compiled to PTX without a GPU.

So that a session with a GPU never loses its time to a typo: the bodies of
``test_cuda_gpu.py`` (``cuda_test_support``) and of ``benchmarks/cuda_ring.py``, for every
payload size, go through the same rendering and NVRTC as on the device. Skipped, with
the reason, where NVRTC cannot be loaded (``pip install 'pdc-cuda[nvrtc]'``).
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pdc_cuda", reason="pdc-cuda is not installed: pip install -e plugins/pdc_cuda")
from cuda_test_support import (
    COUNTING,
    DOUBLE,
    REPLY,
    REQUEST,
    SCALE,
    STATE,
    load_benchmark,
    needs_nvrtc,
)
from pdc_cuda import compile_ring_kernel_ptx, compile_to_ptx

pytestmark = needs_nvrtc()
benchmark = load_benchmark()


def test_the_test_bodies_compile():
    assert ".entry pdc_ring_kernel(" in compile_ring_kernel_ptx(DOUBLE, REQUEST, REPLY)
    ptx = compile_ring_kernel_ptx(COUNTING, REQUEST, REPLY, STATE)
    assert "atom.global.add.u64" in ptx
    assert ".entry scale(" in compile_to_ptx(SCALE)


@pytest.mark.parametrize("size", sorted(benchmark.PAYLOADS.values()))
def test_the_benchmark_echo_body_compiles_for_every_payload(size):
    dtype = benchmark.record_dtype(size)
    assert dtype.itemsize == size
    ptx = compile_ring_kernel_ptx(benchmark.ECHO_BODY, dtype, dtype)
    assert ".entry pdc_ring_kernel(" in ptx


def test_the_benchmark_launch_kernel_compiles():
    assert ".entry echo(" in compile_to_ptx(benchmark.ECHO_KERNEL)


def test_record_sizes_are_exact():
    for size in benchmark.PAYLOADS.values():
        record = np.zeros((), benchmark.record_dtype(size))
        assert record.nbytes == size
