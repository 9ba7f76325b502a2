"""Kernels on the metal backend: MLX-operation bodies everywhere, Metal shaders on a Mac."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from metal_support import HAS_MLX, metal_backend, needs_metal, needs_mlx
from pdc_metal import MetalKernel
from pdc_metal._kernels import parse_kernel_options

from pdc_core import UnifiedBuffer

pytestmark = needs_mlx

if HAS_MLX:
    import mlx.core as mx

EXP_SOURCE = """
    uint elem = thread_position_in_grid.x;
    out[elem] = metal::exp(inp[elem]);
"""


def test_an_mlx_body_runs_on_the_backend_device() -> None:
    metal = metal_backend()
    seen: list[Any] = []

    def body(x: Any, y: Any) -> Any:
        seen.append(mx.default_device())
        return mx.matmul(x, y)

    a = UnifiedBuffer.from_array(np.eye(3, dtype=np.float32), backend=metal)
    b = UnifiedBuffer.from_array(np.arange(9, dtype=np.float32).reshape(3, 3), backend=metal)
    result = metal.run(body, a, b)
    assert seen == [metal.mlx_device]
    np.testing.assert_array_equal(np.asarray(result), np.arange(9).reshape(3, 3))


def test_several_results_into_several_buffers() -> None:
    metal = metal_backend()
    data = UnifiedBuffer.from_array(np.array([1.0, 4.0, 9.0], dtype=np.float32), backend=metal)
    roots = UnifiedBuffer((3,), dtype=np.float32, backend=metal)
    negated = np.zeros(3, dtype=np.float32)
    metal.run(lambda x: (mx.sqrt(x), -x), data, out=(roots, negated))
    np.testing.assert_array_equal(roots.host, [1, 2, 3])
    np.testing.assert_array_equal(negated, [-1, -4, -9])


def test_inputs_from_other_memory_are_copied_in() -> None:
    metal = metal_backend()
    cpu_buf = UnifiedBuffer.from_array(np.ones(4, dtype=np.float32), backend="cpu")
    plain = np.full(4, 2.0, dtype=np.float32)
    assert metal.run(lambda x, y: x + y, cpu_buf, plain).tolist() == [3.0] * 4


def test_bad_outputs_are_named() -> None:
    metal = metal_backend()
    buf = UnifiedBuffer((2,), dtype=np.float32, backend=metal)
    with pytest.raises(ValueError, match=r"2 result\(s\) but 1 output"):
        metal.run(lambda x: (x, x), buf, out=buf)
    with pytest.raises(TypeError, match="not an MLX array"):
        metal.run(lambda x: [3], buf, out=[buf])
    with pytest.raises(ValueError, match="shape"):
        metal.run(lambda x: mx.zeros(3), buf, out=buf)


def test_kernel_options_are_parsed_and_checked() -> None:
    settings = parse_kernel_options(
        [
            "input_names=a, b",
            "output_names=out",
            "header=#include <metal_stdlib>",
            "atomic_outputs=1",
        ]
    )
    assert settings == {
        "input_names": ["a", "b"],
        "output_names": ["out"],
        "header": "#include <metal_stdlib>",
        "atomic_outputs": True,
    }
    with pytest.raises(ValueError, match="needs the option"):
        parse_kernel_options(["input_names=a"])
    with pytest.raises(ValueError, match="unknown kernel option 'block'"):
        parse_kernel_options(["input_names=a", "output_names=o", "block=256"])
    with pytest.raises(ValueError, match="identifiers"):
        parse_kernel_options(["input_names=1a", "output_names=o"])
    with pytest.raises(ValueError, match="true or false"):
        parse_kernel_options(["input_names=a", "output_names=o", "atomic_outputs=maybe"])
    with pytest.raises(TypeError, match="sequence"):
        parse_kernel_options("input_names=a")


def test_kernel_wrapper_passes_the_launch_configuration() -> None:
    """The wrapper around a compiled kernel, with a stand-in for MLX's Metal kernel."""
    metal = metal_backend()
    calls: list[dict[str, Any]] = []

    def compiled(**kwargs: Any) -> list[Any]:
        calls.append(kwargs)
        return [mx.exp(kwargs["inputs"][0])]

    kernel = MetalKernel(
        metal, "myexp", compiled, parse_kernel_options(["input_names=inp", "output_names=out"])
    )
    buf = UnifiedBuffer.from_array(np.zeros(4, dtype=np.float32), backend=metal)
    result = kernel(
        buf,
        grid=(4, 1, 1),
        threadgroup=(4, 1, 1),
        output_shapes=[(4,)],
        output_dtypes=[np.float32],
        out=buf,
    )
    assert result.tolist() == [1.0] * 4
    np.testing.assert_array_equal(buf.host, np.ones(4))
    assert calls[0]["grid"] == (4, 1, 1)
    assert calls[0]["output_dtypes"] == [mx.float32]
    with pytest.raises(ValueError, match="takes 1 input"):
        kernel(
            buf,
            buf,
            grid=(1, 1, 1),
            threadgroup=(1, 1, 1),
            output_shapes=[(4,)],
            output_dtypes=[np.float32],
        )
    with pytest.raises(ValueError, match="give that many"):
        kernel(buf, grid=(1, 1, 1), threadgroup=(1, 1, 1), output_shapes=[], output_dtypes=[])


@needs_metal
@pytest.mark.metal
def test_metal_shader_source_runs_on_the_gpu() -> None:
    metal = metal_backend()
    kernel = metal.compile_kernel(EXP_SOURCE, "myexp", ("input_names=inp", "output_names=out"))
    buf = UnifiedBuffer.from_array(np.zeros(256, dtype=np.float32), backend=metal)
    out = UnifiedBuffer((256,), dtype=np.float32, backend=metal)
    kernel(
        buf,
        grid=(256, 1, 1),
        threadgroup=(64, 1, 1),
        output_shapes=[(256,)],
        output_dtypes=[np.float32],
        out=out,
    )
    np.testing.assert_allclose(out.host, np.ones(256))


@needs_metal
@pytest.mark.metal
def test_a_metal_gpu_view_shares_memory_with_the_host() -> None:
    metal = metal_backend()
    buf = UnifiedBuffer((1024,), dtype=np.float32, backend=metal)
    buf.host[:] = 1.0
    view = buf.metal
    assert np.asarray(view).ctypes.data == buf.host.ctypes.data
    metal.run(lambda x: x * 3, buf, out=buf)
    np.testing.assert_array_equal(buf.host, np.full(1024, 3.0))
