"""The kernel vocabulary pdc_core.cuda re-exports: indices, barriers, memory, atomics.

``grid``, ``gridsize``, ``threadIdx``/``blockIdx``/``blockDim``/``gridDim``, ``laneid``,
the ``syncthreads`` family and the fences, ``shared``/``local``/``const``/``atomic``, and
the intrinsics (``popc``, ``brev``, ``clz``, ``ffs``, ``fma``, ``cbrt``, ``selp``). What
depends on the calling thread asks ``_state()`` for its state, so one function serves
both strategies, and raises pdc's explanatory ``RuntimeError`` outside a kernel that pdc
runs on the host; the intrinsics take plain or per-thread values alike.
"""

from __future__ import annotations

import sys
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from ._state import _state
from ._values import Lanes, _as_dtype, _operand, _shape

# --------------------------------------------------------------------------------------
# the namespace a kernel body uses (re-exported by pdc_core.cuda)


def grid(ndim: int) -> Any:
    """The absolute position of this thread in the grid: an int for ``ndim`` 1, else a tuple.

    ``cuda.grid(1)`` is ``blockIdx.x * blockDim.x + threadIdx.x``.
    """
    if ndim not in (1, 2, 3):
        raise ValueError(f"cuda.grid() takes 1, 2 or 3 dimensions, not {ndim!r}")
    return _state().grid(ndim)


def gridsize(ndim: int) -> Any:
    """Threads in the whole grid per dimension (``blockDim * gridDim``), for grid-stride loops."""
    if ndim not in (1, 2, 3):
        raise ValueError(f"cuda.gridsize() takes 1, 2 or 3 dimensions, not {ndim!r}")
    state = _state()
    run = state.run
    sizes = tuple(np.int64(run.grid3[a] * run.block3[a]) for a in range(ndim))
    return sizes[0] if ndim == 1 else sizes


class _Dim3:
    """``threadIdx``, ``blockIdx``, ``blockDim`` or ``gridDim``: read ``.x``, ``.y``, ``.z``."""

    __slots__ = ("_which",)

    def __init__(self, which: str) -> None:
        self._which = which

    def __repr__(self) -> str:
        return f"pdc_core.cuda.{self._which}"

    def _get(self, axis: int) -> Any:
        state = _state()
        which = self._which
        if which == "threadIdx":
            return state.thread_idx(axis)
        if which == "blockIdx":
            return state.block_idx(axis)
        extents = state.run.block3 if which == "blockDim" else state.run.grid3
        return np.int64(extents[axis])

    @property
    def x(self) -> Any:
        return self._get(0)

    @property
    def y(self) -> Any:
        return self._get(1)

    @property
    def z(self) -> Any:
        return self._get(2)


threadIdx: Final = _Dim3("threadIdx")
blockIdx: Final = _Dim3("blockIdx")
blockDim: Final = _Dim3("blockDim")
gridDim: Final = _Dim3("gridDim")


def laneid() -> Any:
    """This thread's index within its warp."""
    return _state().laneid()


def syncthreads() -> None:
    """Wait until every thread of the block has reached this point (``__syncthreads()``)."""
    _state().syncthreads()


def syncthreads_count(predicate: Any) -> Any:
    """A barrier that returns how many threads of the block passed a true ``predicate``."""
    return _state().syncthreads_count(predicate)


def syncthreads_and(predicate: Any) -> Any:
    """A barrier that returns 1 if ``predicate`` is true for every thread of the block."""
    return _state().syncthreads_and(predicate)


def syncthreads_or(predicate: Any) -> Any:
    """A barrier that returns 1 if ``predicate`` is true for any thread of the block."""
    return _state().syncthreads_or(predicate)


def threadfence() -> None:
    """A memory fence; simulated threads always see each other's completed stores."""
    _state()


threadfence_block = threadfence
threadfence_system = threadfence


def _callsite() -> Any:
    frame = sys._getframe(2)
    return (frame.f_code, frame.f_lasti)


class _SharedNamespace:
    """``cuda.shared``: memory shared by the threads of a block."""

    @staticmethod
    def array(shape: Any, dtype: Any) -> Any:
        """A block-shared array; ``shape`` 0 is the launch's dynamic shared memory.

        Each place in the kernel that calls it gets one array per block, the same on
        every call (shared arrays are static, as in CUDA). Simulated shared memory
        starts zeroed; on a GPU it starts undefined.
        """
        key = _callsite()
        return _state().shared_array(_shape(shape, "shared array"), _as_dtype(dtype), key)


class _LocalNamespace:
    """``cuda.local``: memory private to a thread."""

    @staticmethod
    def array(shape: Any, dtype: Any) -> Any:
        """A thread-private array (zeroed in simulation, undefined on a GPU)."""
        key = _callsite()
        return _state().local_array(_shape(shape, "local array"), _as_dtype(dtype), key)


class _ConstNamespace:
    """``cuda.const``: read-only memory cached for all threads."""

    @staticmethod
    def array_like(array: Any) -> Any:
        """The array itself, to be read only (constant memory on a GPU)."""
        _state()
        return array


class _AtomicNamespace:
    """``cuda.atomic``: read-modify-write operations that return the old value."""

    @staticmethod
    def add(array: Any, index: Any, value: Any) -> Any:
        """``array[index] += value`` atomically; returns the old value."""
        return _state().atomic("add", array, index, (value,))

    @staticmethod
    def sub(array: Any, index: Any, value: Any) -> Any:
        """``array[index] -= value`` atomically; returns the old value."""
        return _state().atomic("sub", array, index, (value,))

    @staticmethod
    def max(array: Any, index: Any, value: Any) -> Any:
        """``array[index] = max(array[index], value)``; returns the old value.

        As in numba, the stored value stays unless ``value`` is greater: a NaN value is
        ignored and a stored NaN stays.
        """
        return _state().atomic("max", array, index, (value,))

    @staticmethod
    def min(array: Any, index: Any, value: Any) -> Any:
        """``array[index] = min(array[index], value)``; returns the old value.

        As in numba, the stored value stays unless ``value`` is smaller: a NaN value is
        ignored and a stored NaN stays.
        """
        return _state().atomic("min", array, index, (value,))

    @staticmethod
    def nanmax(array: Any, index: Any, value: Any) -> Any:
        """Like :meth:`max`, ignoring a NaN operand; returns the old value."""
        return _state().atomic("nanmax", array, index, (value,))

    @staticmethod
    def nanmin(array: Any, index: Any, value: Any) -> Any:
        """Like :meth:`min`, ignoring a NaN operand; returns the old value."""
        return _state().atomic("nanmin", array, index, (value,))

    @staticmethod
    def and_(array: Any, index: Any, value: Any) -> Any:
        """``array[index] &= value`` atomically; returns the old value."""
        return _state().atomic("and_", array, index, (value,))

    @staticmethod
    def or_(array: Any, index: Any, value: Any) -> Any:
        """``array[index] |= value`` atomically; returns the old value."""
        return _state().atomic("or_", array, index, (value,))

    @staticmethod
    def xor(array: Any, index: Any, value: Any) -> Any:
        """``array[index] ^= value`` atomically; returns the old value."""
        return _state().atomic("xor", array, index, (value,))

    @staticmethod
    def exch(array: Any, index: Any, value: Any) -> Any:
        """Store ``value`` and return the old value."""
        return _state().atomic("exch", array, index, (value,))

    @staticmethod
    def inc(array: Any, index: Any, value: Any) -> Any:
        """``array[index] = 0 if old >= value else old + 1``; returns the old value."""
        return _state().atomic("inc", array, index, (value,))

    @staticmethod
    def dec(array: Any, index: Any, value: Any) -> Any:
        """``array[index] = value if old == 0 or old > value else old - 1``; returns old."""
        return _state().atomic("dec", array, index, (value,))

    @staticmethod
    def cas(array: Any, index: Any, old: Any, value: Any) -> Any:
        """Store ``value`` if ``array[index] == old``; returns the value found."""
        return _state().atomic("cas", array, index, (old, value))

    @staticmethod
    def compare_and_swap(array: Any, old: Any, value: Any) -> Any:
        """:meth:`cas` on ``array[0]``."""
        return _state().atomic("cas", array, 0, (old, value))


shared: Final = _SharedNamespace()
local: Final = _LocalNamespace()
const: Final = _ConstNamespace()
atomic: Final = _AtomicNamespace()


# --------------------------------------------------------------------------------------
# intrinsics (CUDA's __popc, __brev, __clz, __ffs, fma, cbrt and selp), per thread or
# over per-thread values

#: Set bits of every byte value, and every byte value with its bits reversed.
_BYTE_POPC: Final = np.array([bin(b).count("1") for b in range(256)], np.int32)
_BYTE_REVERSED: Final = np.array([int(f"{b:08b}"[::-1], 2) for b in range(256)], np.uint8)


def _bits(value: Any, what: str) -> tuple[npt.NDArray[Any], np.dtype[Any]]:
    """``value``'s integers as unsigned values of their width (at least 1-d), and the
    dtype a result of the same type has. A Python int is 32 bits wide when it fits in
    32 bits (as numba types an int literal), else 64."""
    values = value.v if isinstance(value, Lanes) else value
    if isinstance(values, bool | np.bool_) or not isinstance(values, int | np.integer | np.ndarray):
        raise TypeError(f"cuda.{what} takes an integer, not {value!r}")
    dtype: np.dtype[Any]
    if isinstance(values, int):
        if -(1 << 31) <= values < 1 << 32:
            dtype = np.dtype(np.int32 if values < 0 else np.uint32)
        elif -(1 << 63) <= values < 1 << 64:
            dtype = np.dtype(np.int64 if values < 0 else np.uint64)
        else:
            raise OverflowError(f"cuda.{what}: {values} does not fit in 64 bits")
        array = np.array([values], dtype)
    else:
        array = np.atleast_1d(np.asarray(values))
        dtype = array.dtype
        if dtype.kind not in "iu":
            raise TypeError(f"cuda.{what} takes integers, not {dtype} values")
    unsigned = array.astype(np.dtype(f"u{dtype.itemsize}"))  # two's complement bits
    return unsigned, dtype


def _like(value: Any, result: npt.NDArray[Any]) -> Any:
    """``result`` shaped as ``value`` was given: per-thread, a NumPy scalar or an int."""
    if isinstance(value, Lanes):
        return Lanes(result)
    if isinstance(value, np.generic | np.ndarray):
        return result[0]
    return result[0].item()


def _popcount(unsigned: npt.NDArray[Any]) -> npt.NDArray[np.int32]:
    per_byte = _BYTE_POPC[unsigned.view(np.uint8)].reshape(len(unsigned), -1)
    return np.asarray(per_byte.sum(axis=1, dtype=np.int32))


def popc(value: Any) -> Any:
    """The number of set bits of an integer (CUDA's ``__popc``/``__popcll``)."""
    unsigned, _ = _bits(value, "popc")
    return _like(value, _popcount(unsigned))


def brev(value: Any) -> Any:
    """An integer with its bits in reverse order (CUDA's ``__brev``), of the same type."""
    unsigned, dtype = _bits(value, "brev")
    # reverse each byte's bits, then the bytes (the array is little- or big-endian alike)
    flipped = _BYTE_REVERSED[unsigned.view(np.uint8)].view(unsigned.dtype)
    reversed_bits = flipped.byteswap()
    return _like(value, reversed_bits.astype(dtype))


def clz(value: Any) -> Any:
    """The number of leading zero bits of an integer (CUDA's ``__clz``): its width
    for 0."""
    unsigned, dtype = _bits(value, "clz")
    smeared = unsigned.copy()
    shift = 1
    while shift < dtype.itemsize * 8:  # every bit below the highest set bit becomes 1
        smeared |= smeared >> unsigned.dtype.type(shift)
        shift *= 2
    return _like(value, (dtype.itemsize * 8 - _popcount(smeared)).astype(np.int32))


def ffs(value: Any) -> Any:
    """The position of the least significant set bit of an integer, counting from 1
    (CUDA's ``__ffs``): 0 when no bit is set."""
    unsigned, _ = _bits(value, "ffs")
    # (array arithmetic on unsigned integers wraps silently)
    lowest = unsigned & (~unsigned + unsigned.dtype.type(1))
    below = lowest - unsigned.dtype.type(1)  # the bits under the lowest set bit
    position = np.where(unsigned == 0, 0, _popcount(below) + 1).astype(np.int32)
    return _like(value, position)


def fma(a: Any, b: Any, c: Any) -> Any:
    """``a * b + c`` (CUDA's fused multiply-add; simulated with two roundings)."""
    return a * b + c


def cbrt(value: Any) -> Any:
    """The cube root (CUDA's ``cbrt``), of the argument's floating-point type."""
    if isinstance(value, Lanes):
        return Lanes(np.cbrt(value.v))
    result = np.cbrt(value)
    return float(result) if isinstance(value, int | float) else result


def selp(predicate: Any, if_true: Any, if_false: Any) -> Any:
    """``if_true`` where ``predicate`` holds, else ``if_false`` (PTX's ``selp``),
    without a branch: per-thread values select lane by lane."""
    if isinstance(predicate, Lanes):
        return Lanes(np.where(predicate.v, _operand(if_true), _operand(if_false)))
    return if_true if predicate else if_false
