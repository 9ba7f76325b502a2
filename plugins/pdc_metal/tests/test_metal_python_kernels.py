"""``@kernel`` bodies written with MLX operations on the metal backend (run_python_kernel)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from metal_support import metal_backend, needs_mlx

from pdc_core import Capability, UnifiedBuffer, kernel

pytestmark = needs_mlx


@kernel
def affine(x: Any, out: Any) -> None:
    out[...] = x * 2 + 1


def test_metal_declares_python_kernels() -> None:
    assert metal_backend().has(Capability.PYTHON_KERNELS)


def test_results_reach_numpy_buffers_and_mlx_arrays() -> None:
    import mlx.core as mx

    backend = metal_backend()
    x = np.arange(6, dtype=np.float32)
    x.flags.writeable = False  # inputs are not written back
    out = np.zeros(6, np.float32)
    affine(x, out, backend=backend)
    assert out.tolist() == [1, 3, 5, 7, 9, 11]

    buf = UnifiedBuffer((6,), dtype=np.float32, backend=backend)
    address = buf.host.ctypes.data
    affine(x, buf)  # runs on the buffer's backend
    assert buf.host.tolist() == [1, 3, 5, 7, 9, 11]
    assert buf.host.ctypes.data == address  # written into the buffer's own memory

    array = mx.zeros((6,), dtype=mx.float32)
    affine(x, array, backend=backend)
    assert array.tolist() == [1, 3, 5, 7, 9, 11]


def test_on_a_stream_and_async() -> None:
    import anyio

    backend = metal_backend()
    x = np.arange(4, dtype=np.float32)
    out = np.zeros(4, np.float32)
    stream = backend.create_stream()
    try:
        affine(x, out, stream=stream, backend=backend)
        stream.synchronize()
    finally:
        stream.close()
    assert out.tolist() == [1, 3, 5, 7]

    async def main() -> None:
        result = np.zeros(4, np.float32)
        await affine.launch_async(x, result, backend=backend)
        assert result.tolist() == [1, 3, 5, 7]

    anyio.run(main)
    anyio.run(main, backend="trio")


def test_a_body_that_returns_a_value_is_refused() -> None:
    @kernel
    def returns(x: Any) -> Any:
        return x * 2

    with pytest.raises(TypeError, match="a kernel returns nothing"):
        returns(np.ones(3, np.float32), backend=metal_backend())
