"""Launch configuration: the seeds' block-size table, grids from data sizes, validation."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from pdc_core import LaunchConfig, auto_block_size, cuda, get_backend, kernel, launch_config


@pytest.mark.parametrize(
    ("size", "threads"),
    [
        (0, 64),
        (1, 64),
        (64, 64),
        (65, 128),
        (999, 128),
        (1_000, 256),
        (50_000, 256),
        (100_000, 256),
        (100_001, 512),
        (10**9, 512),
    ],
)
def test_auto_block_size_follows_the_seed_table(size: int, threads: int) -> None:
    assert auto_block_size(size) == threads


@pytest.mark.parametrize(
    ("size", "grid", "block"),
    [
        (10, (1,), (64,)),
        (500, (4,), (128,)),
        (1_000, (4,), (256,)),
        (100_000, (391,), (256,)),
        (1_000_000, (1954,), (512,)),
        ((100, 100), (7, 7), (16, 16)),
        ((1000, 1000), (32, 63), (32, 16)),
        ((3, 100_000), (1, 782), (4, 128)),
        ((2, 2), (1, 1), (2, 2)),
        ((8, 8, 8), (1, 2, 2), (8, 4, 4)),
        ((64, 64, 64), (8, 8, 8), (8, 8, 8)),
        ((100, 37), (7, 3), (16, 16)),
    ],
)
def test_automatic_configuration_exact(
    size: Any, grid: tuple[int, ...], block: tuple[int, ...]
) -> None:
    config = launch_config(size)
    assert config == LaunchConfig(grid=grid, block=block)
    extents = (size,) if isinstance(size, int) else size
    for extent, blocks, threads in zip(extents, config.grid, config.block, strict=True):
        assert blocks * threads >= extent > (blocks - 1) * threads


def test_explicit_block_and_ceil_div_grid() -> None:
    assert launch_config(1000, block=(128,)) == LaunchConfig(grid=(8,), block=(128,))
    assert launch_config(1000, block=128) == LaunchConfig(grid=(8,), block=(128,))
    assert launch_config(1024, block=256).grid == (4,)
    assert launch_config(1025, block=256).grid == (5,)
    assert launch_config((100, 37), block=(16, 16)).grid == (7, 3)
    config = launch_config((100, 37, 5), block=(8, 8, 4))
    assert config.grid == (13, 5, 2)
    assert config.grid3 == (13, 5, 2)
    assert config.threads_per_block == 256
    assert config.blocks == 130
    assert config.threads == 130 * 256


def test_size_from_an_array_and_padding_to_three_dimensions() -> None:
    assert launch_config(np.zeros((100, 37))) == launch_config((100, 37))
    config = launch_config(np.zeros(1000, np.float32))
    assert (config.grid3, config.block3) == ((4, 1, 1), (256, 1, 1))
    assert config.ndim == 1


def test_empty_problem_gives_an_empty_grid() -> None:
    config = launch_config(0)
    assert config.grid == (0,)
    assert config.empty
    assert launch_config((0, 100)).empty


def test_device_limit_caps_the_automatic_block() -> None:
    assert launch_config(10**6, max_threads_per_block=128) == LaunchConfig((7813,), (128,))
    # a limit that is not a power of two: the largest power of two below it
    assert launch_config(10**6, max_threads_per_block=768).block == (512,)


@pytest.mark.parametrize(
    ("size", "block", "message"),
    [
        (100, 0, "zero dimension"),
        (100, -1, "negative dimension"),
        (100, (256, 0), "zero dimension"),
        (100, 2048, "dimension x is 2048"),
        ((10, 10, 10), (1, 1, 128), "dimension z is 128"),
        ((10, 10, 10), (32, 32, 2), "2048 threads"),
        (100, (16, 16), "block (16, 16) has 2 dimension"),
        (-5, None, "negative dimension"),
        ((1, 2, 3, 4), None, "1 to 3 dimensions"),
        ((10, 2**30), (1, 1), "dimension y is 1073741824 blocks"),
        (np.zeros(()), None, "0-dimensional"),
        (np.zeros((2, 2, 2, 2)), None, "4 dimensions"),
    ],
)
def test_bad_configurations_raise_value_error_naming_the_value(
    size: Any, block: Any, message: str
) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        launch_config(size, block)


@pytest.mark.parametrize(
    ("size", "block"),
    [
        ("100", None),
        (3.5, None),
        (None, None),
        (True, None),
        (np.float32(3), None),
        (100, "256"),
        (100, (16.0,)),
        (100, (True,)),
    ],
)
def test_non_integer_sizes_and_blocks_raise_type_error(size: Any, block: Any) -> None:
    with pytest.raises(TypeError, match=r"size|block"):
        launch_config(size, block)


def test_auto_block_size_rejects_bad_sizes() -> None:
    with pytest.raises(ValueError, match="negative"):
        auto_block_size(-1)
    with pytest.raises(TypeError, match="int"):
        auto_block_size(2.0)  # type: ignore[arg-type]


@kernel(block=(256,))
def _scale(data: Any, out: Any) -> None:
    i = cuda.grid(1)
    if i < len(data):
        out[i] = data[i] * 2


@kernel
def _add_one(a: Any) -> None:
    x, y = cuda.grid(2)
    if x < a.shape[0] and y < a.shape[1]:
        a[x, y] += 1


def test_kernel_configuration_from_its_arguments() -> None:
    data = np.zeros(1000, np.float32)
    assert _scale.config_for(data, data) == LaunchConfig((4,), (256,))
    assert _scale.config_for(data, data, size=300) == LaunchConfig((2,), (256,))
    assert _scale.config_for(data, data, block=64) == LaunchConfig((16,), (64,))
    # a 2-D argument with a 1-D block: the leading dimension is the problem size
    assert _scale.config_for(np.zeros((600, 3)), data) == LaunchConfig((3,), (256,))
    # no block: the array's dimensions
    assert _add_one.config_for(np.zeros((100, 100))) == LaunchConfig((7, 7), (16, 16))
    assert _add_one.config_for(np.zeros((100, 100)), grid=(2, 2)) == LaunchConfig((2, 2), (16, 16))


def test_kernel_block_is_validated_when_decorating() -> None:
    with pytest.raises(ValueError, match="2048"):

        @kernel(block=(2048,))
        def too_big(data: Any) -> None:
            pass

    with pytest.raises(ValueError, match="zero"):

        @kernel(block=0)
        def empty(data: Any) -> None:
            pass


def test_kernel_without_an_array_needs_a_size() -> None:
    with pytest.raises(ValueError, match="size= or grid="):
        _scale.config_for(3, 4)
    with pytest.raises(ValueError, match=r"give block= \(or size=\)"):
        _add_one.config_for(3, grid=(2, 2))
    with pytest.raises(ValueError, match="grid"):
        _scale(np.zeros(4), np.zeros(4), grid=0)


def test_cpu_device_limit_is_cudas() -> None:
    # the cpu backend reports no maxThreadsPerBlock: CUDA's 1024 applies, for portability
    assert launch_config(10**6, max_threads_per_block=1024).block == (512,)
    with pytest.raises(ValueError, match="1024"):
        _scale.config_for(np.zeros(10), np.zeros(10), block=(2048,), backend=get_backend("cpu"))
