"""Kernel bodies behave as numba.cuda's own test suite expects (issue 46).

Each test holds one difference that numba-cuda's ``cudapy`` tests found between pdc's
simulator (or launcher) and numba; .ci/numba-cuda-suite runs those tests themselves.
Bodies run both vectorised and per thread where the strategy could matter.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from pdc_core import cuda, kernel

MODES = ("lanes", "threads")


# -- 1. a grid and a block with different numbers of dimensions ---------------------------


def write_position(out: Any) -> None:
    x = cuda.threadIdx.x
    y = cuda.threadIdx.y
    out[y, x] = cuda.blockIdx.x * 100 + y * 10 + x


def test_grid_and_block_may_have_different_dimensions() -> None:
    launched = kernel(write_position)
    out = np.zeros((8, 4), np.int64)
    launched[1, (4, 8)](out)
    expected = np.arange(8)[:, None] * 10 + np.arange(4)[None, :]
    np.testing.assert_array_equal(out, expected)
    out2 = np.zeros((8, 4), np.int64)
    kernel(write_position, grid=(1, 1, 1), block=(4, 8))(out2)
    np.testing.assert_array_equal(out2, expected)


def test_grid_limits_are_still_checked() -> None:
    with pytest.raises(ValueError, match="dimension y is 65536 blocks"):
        kernel(write_position)[(1, 65536), 4](np.zeros((8, 4), np.int64))


# -- 2. atomic.max/min with NaN ------------------------------------------------------------


def atomic_max_min(res: Any, vals: Any) -> None:
    i = cuda.grid(1)
    cuda.atomic.max(res, 0, vals[i])
    cuda.atomic.min(res, 1, vals[i])


@pytest.mark.parametrize("mode", MODES)
def test_atomic_max_and_min_ignore_a_nan_value(mode: str) -> None:
    vals = np.array([3.0, np.nan, 7.0, np.nan, -2.0, 5.0, np.nan, 1.0])
    res = np.array([0.0, 0.0])
    cuda.simulate(atomic_max_min, 1, 8, (res, vals), mode=mode)  # type: ignore[arg-type]
    np.testing.assert_array_equal(res, [7.0, -2.0])


@pytest.mark.parametrize("mode", MODES)
def test_atomic_max_and_min_keep_a_stored_nan(mode: str) -> None:
    vals = np.arange(8, dtype=np.float64)
    res = np.array([np.nan, np.nan])
    cuda.simulate(atomic_max_min, 1, 8, (res, vals), mode=mode)  # type: ignore[arg-type]
    assert np.isnan(res).all()


@pytest.mark.parametrize("mode", MODES)
def test_atomic_max_returns_the_old_values_around_nans(mode: str) -> None:
    def body(res: Any, vals: Any, old: Any) -> None:
        i = cuda.grid(1)
        old[i] = cuda.atomic.max(res, 0, vals[i])

    vals = np.array([1.0, np.nan, 4.0, 2.0])
    res = np.zeros(1)
    old = np.zeros(4)
    cuda.simulate(body, 1, 4, (res, vals, old), mode=mode)  # type: ignore[arg-type]
    assert res[0] == 4.0
    np.testing.assert_array_equal(old, [0.0, 1.0, 1.0, 4.0])  # threads in order


# -- 3. tuple arguments holding arrays -----------------------------------------------------


def sum_tuple(out: Any, pair: Any, empty: Any) -> None:
    i = cuda.grid(1)
    if i < out.size:
        (a, (b, scale)) = pair
        out[i] = (a[i] + b[i]) * scale + len(empty)


@pytest.mark.parametrize("mode", MODES)
def test_tuples_of_arrays_nested_and_empty_are_arguments(mode: str) -> None:
    a = np.arange(10.0)
    b = np.ones(10)
    out = np.zeros(10)
    kernel(sum_tuple, options={"cpu_mode": mode})[1, 16](out, (a, (b, 2.0)), ((), ()))
    np.testing.assert_array_equal(out, (a + 1) * 2 + 2)


def test_arrays_in_tuples_are_written_in_place() -> None:
    def fill(pair: Any) -> None:
        i = cuda.grid(1)
        if i < pair[0].size:
            pair[0][i] = i
            pair[1][0][i] = -i

    first, second = np.zeros(6), np.zeros(6)
    kernel(fill)[1, 8]((first, (second,)))
    np.testing.assert_array_equal(first, np.arange(6))
    np.testing.assert_array_equal(second, -np.arange(6))


def test_a_tuple_holding_a_container_is_refused_naming_the_item() -> None:
    with pytest.raises(TypeError, match=r"item 1 of item 0 of argument 1 .* is a list"):
        kernel(sum_tuple)[1, 4](np.zeros(4), ((np.zeros(4), [1.0]), 2.0), ())
