"""Automatic launch configuration (design.md §3.8), pure host logic."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("pdc_cuda", reason="pdc-cuda is not installed: pip install -e plugins/pdc_cuda")
from pdc_cuda import LaunchConfig, auto_block_size, launch_config


@pytest.mark.parametrize(
    ("size", "block"),
    [
        (0, 64),
        (1, 64),
        (64, 64),
        (65, 128),
        (999, 128),
        (1_000, 256),
        (100_000, 256),
        (100_001, 512),
        (10**9, 512),
    ],
)
def test_the_seeds_table(size, block):
    assert auto_block_size(size) == block


def test_block_size_is_capped_by_the_kernel():
    assert auto_block_size(10**7, max_threads_per_block=384) == 384
    assert launch_config(10**7, max_threads_per_block=384).block == (384, 1, 1)


def test_one_dimension():
    config = launch_config(1_000_000)
    assert config == LaunchConfig(grid=(1954, 1, 1), block=(512, 1, 1))
    assert config.threads >= 1_000_000
    assert launch_config(10, block=(256,)).grid == (1, 1, 1)
    assert launch_config(1000, block=256).grid == (4, 1, 1)


def test_two_and_three_dimensions():
    assert launch_config((1920, 1080), block=(16, 16)) == LaunchConfig(
        grid=(120, 68, 1), block=(16, 16, 1)
    )
    assert launch_config((64, 64, 64), block=(8, 8, 8)).grid == (8, 8, 8)
    assert launch_config((5000, 3)).block == (256, 1, 1)


def test_zero_size_launches_nothing():
    config = launch_config(0)
    assert config.empty
    assert config.grid == (0, 1, 1)


@pytest.mark.parametrize(
    ("size", "block", "error", "match"),
    [
        (-1, None, ValueError, "negative dimension -1"),
        (10, 0, ValueError, "non-positive dimension 0"),
        (10, (2048,), ValueError, "dimension x is 2048, CUDA allows at most 1024"),
        (10, (32, 32, 2), ValueError, "block .* has 3 dimension"),
        ((10, 10), (32, 64), ValueError, "2048 threads; .* at most 1024"),
        ((10, 10, 10), (1, 1, 128), ValueError, "dimension z is 128"),
        ((1, 2, 3, 4), None, ValueError, "1 to 3 dimensions"),
        ("10", None, TypeError, "size must be an int"),
        (10, 2.5, TypeError, "block must be an int"),
        ((10, True), None, TypeError, "contains a bool"),
        ((10, 1.5), None, TypeError, "contains 1.5"),
    ],
)
def test_bad_configurations_are_named(size, block, error, match):
    with pytest.raises(error, match=match):
        launch_config(size, block)


def test_grid_beyond_the_device_limit_is_named():
    with pytest.raises(ValueError, match="exceeds the device limit 65535"):
        launch_config((10, 10**6), block=(1, 1))


@settings(max_examples=200, deadline=None)
@given(
    size=st.integers(min_value=1, max_value=2**31 - 1),
    block=st.one_of(st.none(), st.integers(min_value=1, max_value=1024)),
)
def test_grid_covers_exactly(size, block):
    config = launch_config(size, block)
    threads_per_block = config.block[0]
    assert config.grid[0] * threads_per_block >= size
    assert (config.grid[0] - 1) * threads_per_block < size
    assert config.grid[1:] == (1, 1)
