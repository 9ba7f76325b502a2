"""Kernel bodies behave as numba.cuda's own test suite expects (issue 46).

Each test holds one difference that numba-cuda's ``cudapy`` tests found between pdc's
simulator (or launcher) and numba; .ci/numba-cuda-suite runs those tests themselves.
Bodies run both vectorised and per thread where the strategy could matter.
"""

from __future__ import annotations

import collections
import enum
import math
import types
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


# -- 4. a numba record type as a shared array's dtype --------------------------------------

RECORD = np.dtype([("i", np.int32), ("j", np.float32, (3, 2))])


def copy_through_shared(x: Any, y: Any, record_type: Any) -> None:
    sm = cuda.shared.array(4, dtype=record_type)
    tx = cuda.threadIdx.x
    i = cuda.blockIdx.x * cuda.blockDim.x + tx
    sm[tx] = x[i]
    cuda.syncthreads()
    if tx == 0:
        for j in range(4):
            y[cuda.blockIdx.x * 4 + j] = sm[j]


@pytest.mark.parametrize("mode", ["auto", "threads"])
def test_a_numba_record_type_is_a_shared_array_dtype(mode: str) -> None:
    numpy_support = pytest.importorskip("numba.np.numpy_support")
    record_type = numpy_support.from_dtype(RECORD)
    x = np.zeros(8, RECORD)
    x["i"] = np.arange(8)
    x["j"] = np.arange(48, dtype=np.float32).reshape(8, 3, 2)
    y = np.zeros_like(x)

    def body(x: Any, y: Any) -> None:
        copy_through_shared(x, y, record_type)

    cuda.simulate(body, 2, 4, (x, y), mode=mode)  # type: ignore[arg-type]
    np.testing.assert_array_equal(y, x)


def test_a_numba_type_without_a_dtype_is_refused_by_name() -> None:
    numba_types = pytest.importorskip("numba.core.types")

    def body(out: Any) -> None:
        cuda.shared.array(4, dtype=numba_types.unicode_type)

    with pytest.raises(TypeError, match="is not a dtype"):
        cuda.simulate(body, 1, 1, (np.zeros(1),))


# -- 5. math never raises; round at the overflow edge --------------------------------------


def math_edges(x: Any, out: Any) -> None:
    i = cuda.grid(1)
    if i < x.size:
        out[i, 0] = math.sqrt(x[i])
        out[i, 1] = math.log(x[i])
        out[i, 2] = math.exp(x[i] * 1000.0)
        out[i, 3] = math.acos(x[i])


@pytest.mark.parametrize("mode", MODES)
def test_math_domain_and_range_errors_give_nan_or_inf(mode: str) -> None:
    x = np.array([-1.0, 0.0, 4.0, 2.0])
    out = np.zeros((4, 4))
    cuda.simulate(math_edges, 1, 4, (x, out), mode=mode)  # type: ignore[arg-type]
    with np.errstate(all="ignore"):
        expected = np.stack([np.sqrt(x), np.log(x), np.exp(x * 1000.0), np.arccos(x)], axis=1)
    np.testing.assert_array_equal(out, expected)


def round_to(out: Any, value: Any, ndigits: Any) -> None:
    out[0] = round(value, ndigits)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("dtype", "ndigits"), [(np.float64, 12), (np.float32, 300), (np.float64, 400)]
)
def test_round_keeps_the_value_when_scaling_it_overflows(
    mode: str, dtype: Any, ndigits: int
) -> None:
    value = np.finfo(dtype).max
    out = np.zeros(1, dtype)
    cuda.simulate(round_to, 1, 1, (out, value, ndigits), mode=mode)  # type: ignore[arg-type]
    assert out[0] == value


@pytest.mark.parametrize("mode", MODES)
def test_round_to_digits_still_rounds(mode: str) -> None:
    out = np.zeros(1)
    cuda.simulate(round_to, 1, 1, (out, np.float64(2.675123), 2), mode=mode)  # type: ignore[arg-type]
    assert out[0] == round(np.float64(2.675123), 2)


# -- 6. globals and closure values are frozen at the first launch ---------------------------

TAX_RATE = 0.08


def with_tax(prices: Any) -> None:
    i = cuda.grid(1)
    if i < prices.size:
        prices[i] = prices[i] * (1 + TAX_RATE)


@pytest.mark.parametrize("mode", ["auto", "threads"])
def test_globals_are_frozen_at_the_first_launch(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    body = copy_function(with_tax)  # a fresh function: its own first launch
    prices = np.ones(4)
    launched = kernel(body, options={"cpu_mode": mode})
    launched[1, 4](prices)
    monkeypatch.setitem(body.__globals__, "TAX_RATE", 0.5)
    launched[1, 4](prices)
    np.testing.assert_allclose(prices, 1.08**2)


@pytest.mark.parametrize("mode", ["auto", "threads"])
def test_closure_values_are_frozen_at_the_first_launch(mode: str) -> None:
    factor = 2.0

    def scale(values: Any) -> None:
        i = cuda.grid(1)
        if i < values.size:
            values[i] = values[i] * factor

    values = np.ones(4)
    launched = kernel(scale, options={"cpu_mode": mode})
    launched[1, 4](values)
    factor = 10.0  # rebinding the closure variable after the first launch
    launched[1, 4](values)
    np.testing.assert_array_equal(values, 4.0)


def copy_function(function: Any) -> Any:
    copy = types.FunctionType(
        function.__code__, function.__globals__, function.__name__, function.__defaults__
    )
    copy.__qualname__ = function.__qualname__
    return copy


# -- the intrinsics, forall, dispatchers and what is not provided (item 2) ------------------

INTRINSIC_CASES = [
    (cuda.popc, np.uint8(0xFF), 8),
    (cuda.popc, np.uint64(0xFFFFFFFFFFFFFFFF), 64),
    (cuda.popc, -1, 32),
    (cuda.popc, np.int64(-1), 64),
    (cuda.brev, np.uint32(0x000030F0), 0x0F0C0000),
    (cuda.brev, np.uint64(0x000030F0000030F0), 0x0F0C00000F0C0000),
    (cuda.clz, 0x00100000, 11),
    (cuda.clz, 0xFFFFFFFF, 0),
    (cuda.clz, 0, 32),
    (cuda.clz, np.int64(0x10000), 47),
    (cuda.ffs, 0x00100000, 21),
    (cuda.ffs, 0x80000000, 32),
    (cuda.ffs, 0xFFFFFFFF, 1),
    (cuda.ffs, 0, 0),
]


@pytest.mark.parametrize(("function", "value", "expected"), INTRINSIC_CASES)
@pytest.mark.parametrize("mode", MODES)
def test_bit_intrinsics(function: Any, value: Any, expected: int, mode: str) -> None:
    def body(out: Any) -> None:
        out[cuda.grid(1)] = function(value)

    out = np.zeros(8, np.uint64)
    cuda.simulate(body, 1, 8, (out,), mode=mode)  # type: ignore[arg-type]
    assert (out == expected).all()


def per_thread_intrinsics(values: Any, out: Any) -> None:
    i = cuda.grid(1)
    v = values[i]
    out[i, 0] = cuda.popc(v)
    out[i, 1] = cuda.brev(v)
    out[i, 2] = cuda.clz(v)
    out[i, 3] = cuda.ffs(v)
    out[i, 4] = cuda.selp(v > 100, v, 7)


def test_intrinsics_of_per_thread_values_vectorise() -> None:
    values = np.array([0, 1, 2, 3, 0x80000000, 0xFFFFFFFF, 12345, 1 << 20], np.uint32)
    lanes, threads = np.zeros((8, 5), np.int64), np.zeros((8, 5), np.int64)
    stats = cuda.simulate(per_thread_intrinsics, 1, 8, (values, lanes), mode="lanes")
    cuda.simulate(per_thread_intrinsics, 1, 8, (values, threads), mode="threads")
    assert stats.mode == "lanes"
    np.testing.assert_array_equal(lanes, threads)
    assert list(lanes[:, 0]) == [bin(int(v)).count("1") for v in values]
    assert list(lanes[:, 2]) == [32 - int(v).bit_length() for v in values]
    assert list(lanes[:, 4]) == [int(v) if v > 100 else 7 for v in values]


@pytest.mark.parametrize("mode", MODES)
def test_fma_and_cbrt(mode: str) -> None:
    def body(out: Any, x: Any) -> None:
        i = cuda.grid(1)
        out[i, 0] = cuda.fma(x[i], 3.0, 4.0)
        out[i, 1] = cuda.cbrt(x[i])

    x = np.array([2.0, 8.0, -27.0, 0.5], np.float32)
    out = np.zeros((4, 2), np.float32)
    cuda.simulate(body, 1, 4, (out, x), mode=mode)  # type: ignore[arg-type]
    np.testing.assert_allclose(out[:, 0], x * 3 + 4)
    np.testing.assert_allclose(out[:, 1], np.cbrt(x), rtol=1e-6)


def test_intrinsics_refuse_what_is_not_an_integer() -> None:
    with pytest.raises(TypeError, match=r"cuda.popc takes an integer"):
        cuda.popc(1.5)
    with pytest.raises(TypeError, match=r"cuda.clz takes integers, not float64"):
        cuda.clz(np.zeros(2))


def add_one(x: Any) -> None:
    i = cuda.grid(1)
    if i < x.size:
        x[i] += 1


def test_forall_covers_the_tasks() -> None:
    launched = cuda.jit(add_one)
    arr = np.arange(11)
    launched.forall(arr.size)(arr)
    np.testing.assert_array_equal(arr, np.arange(11) + 1)
    launched.forall(arr.size, tpb=4)(arr)
    np.testing.assert_array_equal(arr, np.arange(11) + 2)
    launched.forall(0)(arr)  # no work: nothing launched
    np.testing.assert_array_equal(arr, np.arange(11) + 2)
    with pytest.raises(ValueError, match="negative task count"):
        launched.forall(-1)


def test_numba_dispatcher_methods_other_than_forall_are_explained() -> None:
    launched = cuda.jit(add_one)
    with pytest.raises(AttributeError, match="dispatcher methods other than forall"):
        launched.specialize  # noqa: B018 - the attribute access is the test
    with pytest.raises(AttributeError, match="has no attribute 'nosuch'"):
        launched.nosuch  # noqa: B018


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("fp16", "half-precision"),
        ("random", "xoroshiro128"),
        ("libdevice", "libdevice functions are not simulated"),
        ("syncwarp", "warp-level primitives"),
    ],
)
def test_what_is_not_simulated_is_named(name: str, message: str) -> None:
    with pytest.raises(AttributeError, match=message):
        getattr(cuda, name)


def test_a_numba_dispatcher_becomes_a_pdc_kernel() -> None:
    numba_cuda = pytest.importorskip("numba.cuda")
    dispatcher = numba_cuda.jit(add_one)
    launched = kernel(dispatcher)
    assert launched.py_func is add_one
    arr = np.zeros(5)
    launched[1, 8](arr)
    np.testing.assert_array_equal(arr, 1)
    assert cuda.jit(dispatcher).py_func is add_one


# -- argument kinds numba takes: namedtuples, enum members, foreign host arrays -------------


def read_fields(out: Any, point: Any, colour: Any) -> None:
    out[0] = point.x + point.y
    out[1] = colour.value
    out[2] = colour == Colour.GREEN


class Colour(enum.Enum):
    RED = 1
    GREEN = 2


Point = collections.namedtuple("Point", ["x", "y"])


@pytest.mark.parametrize("mode", MODES)
def test_namedtuples_and_enum_members_are_arguments(mode: str) -> None:
    out = np.zeros(3)
    kernel(read_fields, options={"cpu_mode": mode})[1, 1](out, Point(2.0, 3.0), Colour.GREEN)
    np.testing.assert_array_equal(out, [5.0, 2.0, 1.0])


class CopyingWrapper:
    """An array-like whose __array__ hands out copies, its interface the real memory."""

    def __init__(self, array: np.ndarray[Any, Any]) -> None:
        self.array = array
        self.__array_interface__ = array.__array_interface__

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray[Any, Any]:
        return self.array.copy()


def test_a_foreign_host_array_is_written_through_its_interface() -> None:
    target = np.zeros(4)
    kernel(add_one)[1, 4](CopyingWrapper(target))
    np.testing.assert_array_equal(target, 1)


def test_a_kernel_called_from_a_kernel_is_a_device_function() -> None:
    inner = cuda.jit(lambda x, i: x[i] * 2)

    def outer(x: Any) -> None:
        i = cuda.grid(1)
        if i < x.size:
            x[i] = inner(x, i)

    values = np.arange(6.0)
    kernel(outer)[1, 8](values)
    np.testing.assert_array_equal(values, np.arange(6.0) * 2)


@pytest.mark.parametrize("name", ["float32x4", "float64x2", "int16x3", "uchar4", "double2"])
def test_vector_types_are_named_as_not_provided(name: str) -> None:
    with pytest.raises(AttributeError, match="does not provide CUDA vector types"):
        getattr(cuda, name)


PRICES = np.array([10.0, 25.0, 5.0])


def totals(quantities: Any, out: Any) -> None:
    i = cuda.grid(1)
    if i < out.size:
        out[i] = quantities[i] * PRICES[i]


@pytest.mark.parametrize("mode", ["auto", "threads"])
def test_a_global_array_is_copied_at_the_first_launch(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = copy_function(totals)
    prices = np.array([10.0, 25.0, 5.0])
    monkeypatch.setitem(body.__globals__, "PRICES", prices)
    launched = kernel(body, options={"cpu_mode": mode})
    out = np.zeros(3)
    launched[1, 4](np.ones(3), out)
    prices[:] = [20.0, 50.0, 10.0]  # numba's documentation: the kernel keeps the old values
    launched[1, 4](np.ones(3), out)
    np.testing.assert_array_equal(out, [10.0, 25.0, 5.0])


@pytest.mark.parametrize("mode", ["auto", "threads"])
def test_a_global_array_is_read_only_in_a_kernel(mode: str) -> None:
    def write_global(out: Any) -> None:
        PRICES[0] = 1.0

    with pytest.raises(ValueError, match="read-only"):
        cuda.simulate(write_global, 1, 1, (np.zeros(1),), mode=mode)  # type: ignore[arg-type]


# numba's generator adds uint64 values expecting them to wrap, as they do on a GPU
@pytest.mark.filterwarnings("ignore:overflow encountered in scalar add:RuntimeWarning")
def test_numbas_random_generators_run_as_device_functions() -> None:
    numba_random = pytest.importorskip("numba.cuda.random")
    states = np.empty(32, dtype=numba_random.xoroshiro128p_dtype)
    numba_random.init_xoroshiro128p_states_cpu(states, 46, 0)
    draw = numba_random.xoroshiro128p_uniform_float32

    def body(states: Any, out: Any) -> None:
        i = cuda.grid(1)
        if i < out.size:
            out[i] = draw(states, i)

    first, second = np.zeros(32, np.float32), np.zeros(32, np.float32)
    kernel(body)[1, 32](states.copy(), first)
    kernel(body)[1, 32](states.copy(), second)
    np.testing.assert_array_equal(first, second)  # the same states, the same numbers
    assert ((first >= 0) & (first < 1)).all()
    assert len(np.unique(first)) == 32
