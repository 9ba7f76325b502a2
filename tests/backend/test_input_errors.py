"""Nonsense input gets a named error: sizes that overflow, bad pool limits, bad kernel
arguments, shared memory over the device's limit, and launches too large to simulate."""

from __future__ import annotations

import warnings
from typing import Any, ClassVar

import numpy as np
import pytest
from pdc_cpu import CpuBackend

import pdc_core._kernel
from pdc_core import (
    DeviceInfo,
    MemoryPool,
    PoolLimitError,
    UnifiedBuffer,
    cuda,
    get_backend,
    kernel,
)
from pdc_core.backend import MemoryKind, normalize_shape_dtype

MAX_BYTES = 2**63 - 1


@kernel
def scale(data, out):  # type: ignore[no-untyped-def]
    i = cuda.grid(1)
    if i < len(data):
        out[i] = data[i] * 2


# -- sizes that do not fit ------------------------------------------------------------


OVERSIZED = [
    # (shape, dtype, bytes named in the message)
    ((2**40, 2**40), np.float32, 4 * 2**80),  # wrapped to 0 in int64: "cannot reshape"
    ((2**31, 2**31, 4), np.float32, 4 * 2**64),  # wrapped to 0 as well
    ((2**61,), np.float32, 2**63),  # one past the largest byte count
    ((2**62,), np.float32, 2**64),  # wrapped to 0
    ((2**63,), np.uint8, 2**63),  # the dimension itself is not an int64
    ((3, 2**62), np.complex128, 3 * 16 * 2**62),
]


@pytest.mark.parametrize(("shape", "dtype", "nbytes"), OVERSIZED, ids=str)
def test_normalize_shape_dtype_names_the_byte_count(
    shape: tuple[int, ...], dtype: type[np.generic], nbytes: int
) -> None:
    message = rf"shape \({shape[0]},.*\) of dtype {np.dtype(dtype)} needs {nbytes} bytes"
    with pytest.raises(ValueError, match=message) as info:
        normalize_shape_dtype(shape, dtype)
    assert str(MAX_BYTES) in str(info.value)
    assert "cannot reshape" not in str(info.value)


@pytest.mark.parametrize(("shape", "dtype", "nbytes"), OVERSIZED, ids=str)
def test_unified_buffer_of_an_oversized_shape(
    shape: tuple[int, ...], dtype: type[np.generic], nbytes: int
) -> None:
    with pytest.raises(ValueError, match=f"needs {nbytes} bytes"):
        UnifiedBuffer(shape, dtype)


@pytest.mark.parametrize(("shape", "dtype", "nbytes"), OVERSIZED, ids=str)
def test_unbounded_pool_refuses_an_oversized_shape(
    shape: tuple[int, ...], dtype: type[np.generic], nbytes: int
) -> None:
    pool = MemoryPool()
    with pytest.raises(ValueError, match=f"needs {nbytes} bytes"):
        pool.acquire(shape, dtype)
    assert pool.statistics().misses == 0


@pytest.mark.parametrize(("shape", "dtype", "nbytes"), OVERSIZED, ids=str)
def test_bounded_pool_refuses_an_oversized_shape_as_over_its_limit(
    shape: tuple[int, ...], dtype: type[np.generic], nbytes: int
) -> None:
    pool = MemoryPool(limit=1000)
    with pytest.raises(PoolLimitError, match=f"cannot allocate {nbytes} bytes") as info:
        pool.acquire(shape, dtype)
    assert "limit is 1000 bytes" in str(info.value)
    assert isinstance(info.value, MemoryError)
    stats = pool.statistics()
    assert (stats.misses, stats.bytes_held) == (0, 0)


def test_a_huge_bounded_pool_still_refuses_what_no_array_can_hold() -> None:
    pool = MemoryPool(limit=2**100)
    with pytest.raises(ValueError, match=f"needs {2**80 * 4} bytes"):
        pool.acquire((2**40, 2**40), np.float32)


def test_an_empty_shape_with_a_dimension_numpy_cannot_index() -> None:
    with pytest.raises(ValueError, match=r"spans \d+ bytes in its nonzero dimensions"):
        normalize_shape_dtype((0, 2**63), np.uint8)
    with pytest.raises(ValueError, match=r"shape \(0, 9223372036854775807\) of dtype float32"):
        normalize_shape_dtype((0, MAX_BYTES), np.float32)


def test_the_largest_sizes_are_still_accepted() -> None:
    assert normalize_shape_dtype((MAX_BYTES,), np.uint8) == ((MAX_BYTES,), np.dtype(np.uint8))
    assert normalize_shape_dtype((0, MAX_BYTES), np.uint8)[0] == (0, MAX_BYTES)
    assert normalize_shape_dtype((2**61 - 1,), np.float32)[0] == (2**61 - 1,)
    assert normalize_shape_dtype((0, 2**40, 2**20), np.uint8)[0] == (0, 2**40, 2**20)
    assert UnifiedBuffer((0, 2**40, 2**20), np.uint8).size == 0


def test_pool_byte_counts_are_exact() -> None:
    pool = MemoryPool(limit=3 * 2**20)
    with pytest.raises(PoolLimitError, match=f"cannot allocate {8 * 2**20} bytes for shape"):
        pool.acquire((2**10, 2**10), np.float64)
    with pool.lease((2**10, 2**8), np.float64) as buf:  # 2 MiB fits
        assert buf.nbytes == 2 * 2**20
    assert pool.statistics().bytes_held == 2 * 2**20


def test_out_of_memory_keeps_its_type_and_names_the_buffer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    backend = get_backend("cpu")

    def allocate(shape: tuple[int, ...], dtype: np.dtype[Any], kind: MemoryKind) -> Any:
        raise MemoryError("Unable to allocate 4.00 TiB")

    monkeypatch.setattr(backend, "allocate", allocate)
    buf = UnifiedBuffer((2**40,), np.float32, backend=backend)  # memory on first use
    with pytest.raises(MemoryError, match="Unable to allocate") as info:
        buf.allocate()
    assert info.value.__notes__ == [
        f"while allocating a UnifiedBuffer of shape ({2**40},) and dtype float32 "
        f"({4 * 2**40} bytes) on cpu:0"
    ]


# -- pool limits -----------------------------------------------------------------------


@pytest.mark.parametrize("limit", [True, False, 1.5, "1000", 10.0, [1000]], ids=repr)
def test_pool_limit_must_be_an_int(limit: Any) -> None:
    with pytest.raises(TypeError, match="limit must be a number of bytes"):
        MemoryPool(limit=limit)


def test_pool_limit_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="limit must be a non-negative number of bytes"):
        MemoryPool(limit=-1)


def test_pool_limit_may_be_a_numpy_int_or_zero() -> None:
    pool = MemoryPool(limit=np.int64(4096))  # type: ignore[arg-type]
    assert pool.limit == 4096
    assert type(pool.limit) is int
    assert pool.statistics().limit == 4096
    assert MemoryPool(limit=0).limit == 0
    assert MemoryPool(limit=None).limit is None
    with pytest.raises(PoolLimitError, match="limit is 0 bytes"):
        MemoryPool(limit=0).acquire((1,), np.uint8)
    empty = MemoryPool(limit=0)
    empty.release(empty.acquire((0,), np.uint8))  # an empty buffer fits a zero limit


# -- kernel arguments --------------------------------------------------------------------

TAKES = r"kernels take arrays \(NumPy, CuPy, MLX or UnifiedBuffer\)"


def test_a_list_where_an_array_is_expected() -> None:
    out = np.zeros(2, np.float32)
    with pytest.raises(TypeError, match=f"argument 0 of kernel 'scale' is a list; {TAKES}") as info:
        scale([1.0, 2.0], out)
    assert "np.asarray" in str(info.value)
    assert "parameter 'data'" in str(info.value)
    assert (out == 0).all()


def test_lists_only_are_refused_as_lists_not_as_unsizable() -> None:
    with pytest.raises(TypeError, match=f"argument 0 of kernel 'scale' is a list; {TAKES}"):
        scale([1.0, 2.0], [0.0, 0.0])
    with pytest.raises(TypeError, match=f"argument 1 of kernel 'scale' is a list; {TAKES}"):
        scale(np.zeros(2), [0.0, 0.0])
    with pytest.raises(TypeError, match="argument 0 of kernel 'scale' is a list"):
        scale[1, 32]([1.0, 2.0], [0.0, 0.0])
    with pytest.raises(TypeError, match="argument 0 of kernel 'scale' is a list"):
        scale.config_for([1.0, 2.0], np.zeros(2))


@pytest.mark.parametrize("bad", [{"a": 1}, {1.0}, "data", b"data", bytearray(2)], ids=repr)
def test_other_containers_are_refused_naming_the_position(bad: Any) -> None:
    name = type(bad).__name__
    with pytest.raises(TypeError, match=f"argument 0 of kernel 'scale' is a {name}; {TAKES}"):
        scale(bad, np.zeros(2))


async def test_a_list_is_refused_by_launch_async_too() -> None:
    with pytest.raises(TypeError, match=f"argument 0 of kernel 'scale' is a list; {TAKES}"):
        await scale.launch_async([1.0, 2.0], np.zeros(2))


# -- shared memory ----------------------------------------------------------------------


class SmallSharedCpu(CpuBackend):
    """The cpu backend, reporting a device with 1 KiB of shared memory per block."""

    name: ClassVar[str] = "smallshared"

    @classmethod
    def devices(cls) -> list[DeviceInfo]:
        return [
            DeviceInfo("smallshared", 0, "small", "cpu", properties={"sharedMemPerBlock": 1024})
        ]


def test_shared_mem_over_cudas_default_limit() -> None:
    data = np.arange(4, dtype=np.float32)
    out = np.zeros(4, np.float32)
    scale(data, out, shared_mem=48 * 1024)  # the limit itself is fine
    np.testing.assert_array_equal(out, data * 2)
    with pytest.raises(ValueError, match="shared_mem=49153 bytes") as info:
        scale(data, out, shared_mem=48 * 1024 + 1)
    assert "the limit is 49152 bytes" in str(info.value)
    assert "sharedMemPerBlock" in str(info.value)
    with pytest.raises(ValueError, match="the limit is 49152 bytes"):
        scale[1, 4, 0, 2**40](data, out)
    with pytest.raises(ValueError, match="shared_mem must not be negative"):
        scale(data, out, shared_mem=-1)


def test_shared_mem_over_the_devices_reported_limit() -> None:
    backend = SmallSharedCpu()
    data = np.arange(4, dtype=np.float32)
    out = np.zeros(4, np.float32)
    scale(data, out, shared_mem=1024, backend=backend)
    with pytest.raises(
        ValueError, match="shared_mem=1025 bytes is more than smallshared:0"
    ) as info:
        scale(data, out, shared_mem=1025, backend=backend)
    assert "the limit is 1024 bytes" in str(info.value)
    assert "its sharedMemPerBlock" in str(info.value)


async def test_shared_mem_limit_applies_to_launch_async() -> None:
    with pytest.raises(ValueError, match="the limit is 49152 bytes"):
        await scale.launch_async(np.zeros(4), np.zeros(4), shared_mem=10**6)


# -- launches too large for the simulator ------------------------------------------------


def test_a_huge_grid_on_the_simulator_warns_before_it_runs() -> None:
    out = np.zeros(4, np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # refuse the launch instead of running it
        with pytest.raises(UserWarning) as info:
            scale[2**20, 1024](np.ones(4, np.float32), out)
    message = str(info.value)
    assert "1,073,741,824 threads" in message
    assert "roughly 10^6-10^7 simple threads per second" in message
    assert "cpu:0" in message
    assert (out == 0).all()  # nothing ran


def test_the_warning_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pdc_core._kernel, "_SIMULATOR_WARN_THREADS", 256)
    data = np.arange(300, dtype=np.float32)
    out = np.zeros(300, np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scale(data[:256], out[:256], block=256)  # exactly the threshold: no warning
    with pytest.warns(UserWarning, match="512 threads") as record:
        scale(data, out, block=256)
    np.testing.assert_array_equal(out, data * 2)  # it still ran
    assert record[0].filename == __file__  # attributed to the caller's line
    with pytest.warns(UserWarning, match="512 threads") as record:
        scale[2, 256](data, out)
    assert record[0].filename == __file__


async def test_the_warning_from_launch_async(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pdc_core._kernel, "_SIMULATOR_WARN_THREADS", 256)
    data = np.arange(300, dtype=np.float32)
    out = np.zeros(300, np.float32)
    with pytest.warns(UserWarning, match="simulates every thread on the CPU") as record:
        await scale.launch_async(data, out, block=256)
    np.testing.assert_array_equal(out, data * 2)
    assert record[0].filename == __file__


def test_only_the_cpu_simulator_warns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pdc_core._kernel, "_SIMULATOR_WARN_THREADS", 256)
    data = np.arange(300, dtype=np.float32)
    out = np.zeros(300, np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scale(data, out, block=256, backend=SmallSharedCpu())
        scale.config_for(data, out, block=256)  # no launch, no warning
    np.testing.assert_array_equal(out, data * 2)
