"""The conformance kit's Python-kernel check (a role of ``BackendConformance``).

With ``PYTHON_KERNELS`` the backend runs the seeds' numba.cuda-style ``@kernel``
examples, compared with NumPy; a backend whose Python kernels are other bodies is told
apart by the error ``pdc_core.cuda`` raises outside a kernel, and the check skips.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from pdc_core import cuda, kernel
from pdc_core.backend import Backend, Capability

from ._conformance_base import ConformanceBase, bounded

__all__ = ["PythonKernelChecks"]

_OUTSIDE_KERNEL = "pdc_core.cuda functions can only be called inside a kernel"


# -- the seeds' kernels (seed 001: performance guide; seed 004: numba/CuPy guide) ---------


@kernel(block=(256,))
def _vector_add(a: Any, b: Any, out: Any) -> None:
    i = cuda.grid(1)
    if i < len(out):
        out[i] = a[i] + b[i]


@kernel
def _add_one(A: Any) -> None:
    x, y = cuda.grid(2)
    if x < A.shape[0] and y < A.shape[1]:
        A[x, y] += 1


@kernel
def _reduce(data: Any, out: Any) -> None:
    shared = cuda.shared.array(256, dtype=np.float32)
    i = cuda.grid(1)
    tid = cuda.threadIdx.x
    if i < len(data):
        shared[tid] = data[i]
    else:
        shared[tid] = 0
    cuda.syncthreads()
    s = 128
    while s > 0:
        if tid < s:
            shared[tid] += shared[tid + s]
        cuda.syncthreads()
        s //= 2
    if tid == 0:
        out[cuda.blockIdx.x] = shared[0]


class PythonKernelChecks(ConformanceBase):
    """The seeds' ``@kernel`` examples on the backend; :meth:`run_python_kernel_examples`
    is the hook a backend with another body format overrides."""

    def run_python_kernel_examples(self, backend: Backend) -> None:
        """Run the seeds' numba.cuda-style ``@kernel`` examples on ``backend``."""
        n = 1000
        a = np.arange(n, dtype=np.float32)
        b = np.full(n, 0.5, dtype=np.float32)
        out = np.zeros(n, dtype=np.float32)
        _vector_add(a, b, out, backend=backend)
        np.testing.assert_array_equal(out, a + b)

        out[...] = 0
        stream = backend.create_stream()
        try:
            _vector_add(a, a, out, stream=stream, backend=backend)
            bounded(stream.synchronize, self.timeout, "stream.synchronize() after a launch")
        finally:
            stream.close()
        np.testing.assert_array_equal(out, a + a)

        matrix = np.arange(100 * 37, dtype=np.float64).reshape(100, 37)
        expected = matrix + 1
        _add_one(matrix, grid=(7, 3), block=(16, 16), backend=backend)
        np.testing.assert_array_equal(matrix, expected)

        data = np.arange(1000, dtype=np.float32)  # block sums are exact in float32
        sums = np.zeros(4, dtype=np.float32)
        _reduce(data, sums, grid=4, block=256, backend=backend)
        np.testing.assert_array_equal(sums, [data[k * 256 : (k + 1) * 256].sum() for k in range(4)])

    def test_python_kernels_run_the_seeds_examples(self, backend: Backend) -> None:
        """A backend declaring Python kernels runs the seeds' ``@kernel`` examples
        (:meth:`run_python_kernel_examples`); skipped without the capability."""
        if not backend.has(Capability.PYTHON_KERNELS):
            pytest.skip(f"the {backend.name} backend declares no Python kernels")
        try:
            self.run_python_kernel_examples(backend)
        except RuntimeError as exc:
            if _OUTSIDE_KERNEL not in str(exc):
                raise
            pytest.skip(
                f"the {backend.name} backend runs Python kernels, but not numba.cuda-style "
                "bodies (cuda.grid); override run_python_kernel_examples to check its own"
            )
