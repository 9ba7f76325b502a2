"""Running Python kernel bodies on the host: pdc's simulator of the CUDA thread model.

A kernel body written in numba.cuda style (``i = cuda.grid(1)``, ``cuda.threadIdx.x``,
``cuda.shared.array``, ``cuda.syncthreads()``, ``cuda.atomic.add``) is run by
:func:`simulate` for every thread of a grid. Two execution strategies exist, and the
default (``mode="auto"``) picks between them per chunk of blocks:

**lanes** (vectorised)
    The body runs *once* for many threads at a time. Thread indices are
    :class:`Lanes` — one value per thread, held in a NumPy array — and every
    operation on them is a NumPy operation over all threads. Arrays the body reaches
    (arguments, globals, closures, shared and local memory) are wrapped so that
    indexing with per-thread indices gathers and scatters, and every store is logged.

    Where threads would take different paths (``if i < n:`` true for some threads and
    false for others; any conversion of a per-thread value to a single Python value),
    the run stops, its stores are undone from the log, and the body is re-run
    separately for each group of threads that agree. Anything the vectorised form
    cannot express (slicing with per-thread indices, try/except in the body, an
    operation on a per-thread value that is not elementwise, a floating-point error)
    undoes the run's stores and runs those threads one by one instead, so the outcome
    is always the one of running each thread on its own. A branch that only assigns
    local names from expressions without side effects is if-converted instead
    (:mod:`pdc_core.cuda._ifconvert`): its condition selects each value lane by lane,
    and the threads do not split. In a kernel with barriers
    (``cuda.syncthreads()``) divergence is handled without undoing: each group of
    agreeing threads continues from the branch on an OS thread of its own (replaying
    what the run did before it, for its lanes, without repeating a store) only to the
    next barrier, where all groups meet before any goes on (:class:`_LaneGroups`);
    only more than ``MAX_GROUPS`` groups, or what cannot be vectorised, undo the
    chunk and re-run it in ``threads`` mode. A body that gave up vectorising for
    divergence or barriers is remembered, and runs per thread at once afterwards.

**threads**
    The body is called once per thread with plain NumPy arrays, in CUDA's order
    (blocks in order, threads x-fastest within a block). Kernels that call
    ``cuda.syncthreads()`` run each block with one OS thread per CUDA thread and a real
    barrier, like numba's CUDA simulator; others run sequentially.

Guarantees and limits:

- For race-free kernels (no thread reads what another thread writes, except through
  atomics or after a barrier) both strategies give the results of running each thread
  on its own. Racy kernels get *a* result, as on a GPU, not necessarily the same one.
- Integer indices are ``numpy.int64`` in both strategies (as in numba), so NumPy's
  type promotion is the same in both. Values that are Python ``float``/``int`` in
  the per-thread run (results of :mod:`math` functions, ``range`` loop variables over
  per-thread bounds) are NumPy ``float64``/``int64`` arrays in the vectorised run and
  promote "strongly", so mixed-precision arithmetic with them can differ in the last
  bit; results of the :mod:`math` functions are computed in double precision in both.
- As in numba: globals and closure variables a body (or a device function it calls)
  names are read at its first launch and frozen there (numba reads them when it
  compiles; a NumPy array is copied, read-only); :mod:`math` functions give NaN or
  inf where Python's raise ``ValueError``/``OverflowError`` (a GPU raises nothing),
  and ``round(x, ndigits)`` gives ``x`` itself where scaling it by ``10**ndigits``
  overflows.
- The body may be executed more than once for a thread in the vectorised strategy (a
  divergent run is undone and replayed). Stores to arrays and ``print`` are undone or
  deferred correctly; other side effects (appending to Python lists, I/O) may repeat.
- Cost: the vectorised strategy runs at NumPy speed (tens of millions of threads per
  second for simple bodies, barrier kernels included); per-thread execution runs
  roughly a million simple threads per second, and blocks with barriers far fewer
  (one OS thread per CUDA thread). Use ``mode="lanes"`` to be told, by an exception,
  when a body cannot be vectorised, and :class:`SimulationStats` (returned by
  :func:`simulate`) to see which strategy ran.
"""

from __future__ import annotations

import builtins
import contextlib
import dis
import math
import operator
import sys
import threading
import types
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, NoReturn

import numpy as np
import numpy.typing as npt
from numpy.lib.mixins import NDArrayOperatorsMixin

from .._launch import DEFAULT_MAX_THREADS_PER_BLOCK, check_block, dim3, dims
from ._ifconvert import LANES_TEST, SELECT, if_converted

__all__ = [
    "LANE_CHUNK",
    "MAX_GROUPS",
    "MAX_RUNS",
    "MIN_GROUP",
    "UNDO_BUDGET",
    "Lanes",
    "SimulationMode",
    "SimulationStats",
    "Target",
    "atomic",
    "bind_vocabulary",
    "blockDim",
    "blockIdx",
    "brev",
    "cbrt",
    "clz",
    "const",
    "ffs",
    "fma",
    "grid",
    "gridDim",
    "gridsize",
    "laneid",
    "local",
    "popc",
    "selp",
    "shared",
    "simulate",
    "syncthreads",
    "syncthreads_and",
    "syncthreads_count",
    "syncthreads_or",
    "threadIdx",
    "threadfence",
    "threadfence_block",
    "threadfence_system",
    "to_numba",
    "warpsize",
]

SimulationMode = Literal["auto", "lanes", "threads"]
_MODES: Final = ("auto", "lanes", "threads")

#: Threads in a warp (``cuda.warpsize``).
warpsize: Final = 32

#: Most threads vectorised together (a chunk is this many threads, in whole blocks).
LANE_CHUNK: Final = 1 << 18
#: A divergence into more groups than this runs those threads one by one.
MAX_GROUPS: Final = 32
#: Vectorised runs (including replays) per chunk before the rest runs per thread.
MAX_RUNS: Final = 512
#: Groups smaller than this run per thread (vectorising them costs more than it saves).
MIN_GROUP: Final = 4
#: Bytes of overwritten values the undo log may hold before a run is split in halves.
UNDO_BUDGET: Final = 64 << 20

_BARRIER_NAMES: Final = frozenset(
    {"syncthreads", "syncthreads_count", "syncthreads_and", "syncthreads_or"}
)


# --------------------------------------------------------------------------------------
# control flow of the vectorised strategy (BaseException: a body's ``except Exception``
# must never swallow them)


class _LaneSignal(BaseException):
    pass


class _Diverge(_LaneSignal):
    """Threads disagree: re-run each group of threads with equal ``key`` separately."""

    def __init__(self, key: npt.NDArray[Any]) -> None:
        super().__init__("threads diverge")
        self.key = key


class _Unsupported(_LaneSignal):
    """The vectorised strategy cannot express this; run these threads one by one."""


class _NeedThreads(_LaneSignal):
    """Barrier semantics need every thread of a block: re-run the chunk in threads mode."""


class _UndoOverflow(_LaneSignal):
    """The undo log outgrew its budget: re-run this group in smaller pieces."""


class _Aborted(BaseException):
    """Another simulated thread of the launch failed; this one stops."""


# --------------------------------------------------------------------------------------
# per-thread values of the vectorised strategy

_SCALARS = (int, float, complex, bool, np.generic)


def _operand(value: Any) -> Any:
    if isinstance(value, Lanes):
        return value.v
    if isinstance(value, _SCALARS):
        return value
    raise _Unsupported(f"an operation mixes per-thread values with {type(value).__name__}")


def _uniform(values: npt.NDArray[Any]) -> bool:
    """True when every lane holds the same bits (so NaNs are equal, 0.0 and -0.0 not)."""
    if values.shape[0] == 1:
        return True
    raw = np.ascontiguousarray(values).view(np.uint8).reshape(values.shape[0], -1)
    return bool((raw == raw[0]).all())


class Lanes(NDArrayOperatorsMixin):
    """One value per simulated thread (lane), in the vectorised strategy.

    Arithmetic, comparisons and NumPy ufuncs apply lane by lane and give ``Lanes``.
    Turning it into one Python value (``if``, ``while``, ``int()``, ``range()``,
    indexing a plain Python object) works when every lane agrees, and otherwise makes
    the simulator re-run the body once per group of agreeing lanes. Kernel code never
    needs to know about this class; it exists so that ``cuda.grid(1)`` can stand for
    many threads at once.
    """

    __slots__ = ("v",)
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, values: npt.NDArray[Any]) -> None:
        self.v = values

    def __repr__(self) -> str:
        return f"Lanes({self.v!r})"

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        if method != "__call__" or "out" in kwargs or "where" in kwargs:
            raise _Unsupported(f"numpy.{ufunc.__name__}.{method} of per-thread values")
        result = ufunc(*(_operand(x) for x in inputs), **kwargs)
        if isinstance(result, tuple):
            return tuple(Lanes(r) for r in result)
        return Lanes(result)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        if func not in _ELEMENTWISE_FUNCTIONS:
            raise _Unsupported(f"numpy.{getattr(func, '__name__', func)} of per-thread values")
        result = func(*(_operand(a) for a in args), **{k: _operand(v) for k, v in kwargs.items()})
        if isinstance(result, np.ndarray) and result.ndim == 1:
            return Lanes(result)
        raise _Unsupported(f"numpy.{func.__name__} did not give one value per thread")

    # -- in-place operators make new values (``i += 1`` must not change a cached index) --

    def _rebind_instead(self, other: Any) -> Any:
        return NotImplemented

    __iadd__ = __isub__ = __imul__ = __imatmul__ = __itruediv__ = __ifloordiv__ = _rebind_instead
    __imod__ = __ipow__ = __ilshift__ = __irshift__ = __iand__ = __ixor__ = _rebind_instead
    __ior__ = _rebind_instead

    # -- conversions to a single Python value --------------------------------------------

    def _single(self) -> Any:
        if _uniform(self.v):
            return self.v[0]
        raise _Diverge(self.v)

    def __bool__(self) -> bool:
        values = self.v
        if values.dtype.kind not in "biufc":
            raise _Unsupported(f"truth value of per-thread {values.dtype} values")
        truth = values if values.dtype.kind == "b" else values != 0
        if truth.all():
            return True
        if not truth.any():
            return False
        raise _Diverge(truth)

    def __index__(self) -> int:
        if self.v.dtype.kind not in "iu":
            raise TypeError(f"{self.v.dtype} values cannot be used as an index")
        return operator.index(self._single())

    def __int__(self) -> int:
        return int(self._single())

    def __float__(self) -> float:
        return float(self._single())

    def __complex__(self) -> complex:
        return complex(self._single())

    def item(self) -> Any:
        """The value as a Python scalar, as ``ndarray.item()`` gives it; when the lanes
        disagree, the simulator re-runs the body once per group of agreeing lanes."""
        return self._single().item()

    def __str__(self) -> str:
        return str(self._single())

    def __format__(self, spec: str) -> str:
        return format(self._single(), spec)

    def __round__(self, ndigits: int | None = None) -> Lanes:
        if ndigits is None:
            if self.v.dtype.kind in "fc":
                return Lanes(np.rint(self.v).astype(np.int64))
            return Lanes(self.v.astype(np.int64))
        return Lanes(np.round(self.v, ndigits))

    def __floor__(self) -> Lanes:
        return Lanes(np.floor(self.v).astype(np.int64))

    def __ceil__(self) -> Lanes:
        return Lanes(np.ceil(self.v).astype(np.int64))

    def __trunc__(self) -> Lanes:
        return Lanes(np.trunc(self.v).astype(np.int64))

    # -- a scalar has no length, items or reductions -------------------------------------

    def __len__(self) -> int:
        raise TypeError("a per-thread scalar has no len()")

    def __iter__(self) -> Iterator[Any]:
        raise TypeError("a per-thread scalar is not iterable")

    def __getitem__(self, index: Any) -> Any:
        raise TypeError("a per-thread scalar cannot be indexed")

    # -- the few ndarray attributes a scalar also has ------------------------------------

    @property
    def dtype(self) -> np.dtype[Any]:
        """The NumPy dtype of the lanes' values."""
        return self.v.dtype

    @property
    def real(self) -> Lanes:
        """The real part of every lane."""
        return Lanes(self.v.real)

    @property
    def imag(self) -> Lanes:
        """The imaginary part of every lane."""
        return Lanes(self.v.imag)

    def conjugate(self) -> Lanes:
        """The complex conjugate of every lane (``conj`` is the same)."""
        return Lanes(self.v.conjugate())

    conj = conjugate

    def astype(self, dtype: Any) -> Lanes:
        """Every lane converted to ``dtype`` (a NumPy dtype or a numba type)."""
        return Lanes(self.v.astype(_as_dtype(dtype)))


_ELEMENTWISE_FUNCTIONS: Final = frozenset(
    {np.where, np.clip, np.round, np.around, np.isclose, np.nan_to_num, np.real, np.imag}
)


def _as_dtype(dtype: Any) -> np.dtype[Any]:
    """A NumPy dtype from anything that names one, numba types (``float32``) included."""
    if isinstance(dtype, _Caster):
        return dtype.dtype
    if type(dtype).__module__.startswith("numba"):
        # numba's own conversion knows its records (numba.np.numpy_support.from_dtype)
        # and scalar types; numba is imported already when one of its types is given
        from numba.np import numpy_support

        try:
            converted: np.dtype[Any] = numpy_support.as_dtype(dtype)
        except Exception:  # numba's NumbaNotImplementedError: no dtype for this type
            pass
        else:
            return converted
    try:
        result: np.dtype[Any] = np.dtype(dtype)
    except (TypeError, ValueError):
        pass
    else:
        return result
    raise TypeError(f"{dtype!r} is not a dtype (give a NumPy dtype such as np.float32)")


def _shape(shape: Any, what: str) -> tuple[int, ...]:
    if isinstance(shape, bool):
        raise TypeError(f"{what} shape must be an int or a tuple of ints, not {shape!r}")
    if isinstance(shape, int | np.integer):
        items: tuple[Any, ...] = (shape,)
    elif isinstance(shape, tuple | list):
        items = tuple(shape)
    else:
        raise TypeError(f"{what} shape must be an int or a tuple of ints, not {shape!r}")
    result = []
    for item in items:
        try:
            extent = operator.index(item)
        except TypeError:
            raise TypeError(f"{what} shape {shape!r} contains {item!r}, not an int") from None
        if extent < 0:
            raise ValueError(f"{what} shape {shape!r} has a negative dimension")
        result.append(extent)
    return tuple(result)


# --------------------------------------------------------------------------------------
# arrays in the vectorised strategy


class _UndoLog:
    """Values overwritten by the current chunk, so a run can be undone exactly."""

    def __init__(self) -> None:
        self.entries: list[tuple[npt.NDArray[Any], Any, npt.NDArray[Any]]] = []
        self.nbytes = 0

    def record(self, array: npt.NDArray[Any], index: Any) -> None:
        if not array.flags.writeable:
            raise ValueError("assignment destination is read-only")
        old = np.array(array[index], copy=True)
        if self.nbytes + old.nbytes > UNDO_BUDGET and self.entries:
            raise _UndoOverflow
        self.nbytes += old.nbytes
        self.entries.append((array, index, old))

    def mark(self) -> int:
        return len(self.entries)

    def rollback(self, mark: int) -> None:
        for array, index, old in reversed(self.entries[mark:]):
            array[index] = old
        self.commit(mark)

    def commit(self, mark: int) -> None:
        """Forget entries after ``mark``: those stores can no longer be undone."""
        for _, _, old in self.entries[mark:]:
            self.nbytes -= old.nbytes
        del self.entries[mark:]


def _lane_index(index: Any, ndim: int) -> tuple[Any, ...] | None:
    """The components of ``index`` when some are per-thread; None when all are uniform."""
    items = index if isinstance(index, tuple) else (index,)
    if not any(isinstance(item, Lanes) for item in items):
        return None
    components: list[Any] = []
    for item in items:
        if isinstance(item, Lanes):
            if item.v.dtype.kind not in "iu":
                raise IndexError(f"arrays cannot be indexed with {item.v.dtype} values")
            components.append(item.v)
        elif isinstance(item, int | np.integer) and not isinstance(item, bool | np.bool_):
            components.append(int(item))
        else:
            raise _Unsupported(f"index {item!r} mixed with per-thread indices")
    if len(components) > ndim:
        raise IndexError(f"too many indices for an array of {ndim} dimension(s)")
    if len(components) < ndim:
        raise _Unsupported("a per-thread index selecting sub-arrays")
    return tuple(components)


def _store_value(value: Any) -> Any:
    if isinstance(value, Lanes):
        return value.v
    if isinstance(value, _SCALARS):
        return value
    raise _Unsupported(f"storing a {type(value).__name__} into an array element")


class _LaneArray:
    """An argument, global or closure array seen by the vectorised strategy."""

    __slots__ = ("a", "run")

    def __init__(self, array: npt.NDArray[Any], run: _ChunkRun) -> None:
        self.a = array
        self.run = run

    def __repr__(self) -> str:
        return f"<array {self.a.shape} {self.a.dtype} of a simulated kernel>"

    def __len__(self) -> int:
        return len(self.a)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.a.shape

    @property
    def size(self) -> int:
        return self.a.size

    @property
    def ndim(self) -> int:
        return self.a.ndim

    @property
    def dtype(self) -> np.dtype[Any]:
        return self.a.dtype

    @property
    def itemsize(self) -> int:
        return self.a.itemsize

    @property
    def nbytes(self) -> int:
        return self.a.nbytes

    @property
    def strides(self) -> tuple[int, ...]:
        return self.a.strides

    def _resolve(self, index: Any, state: _LaneState) -> tuple[npt.NDArray[Any], tuple[Any, ...]]:
        components = _lane_index(index, self.a.ndim)
        if components is None:
            items = index if isinstance(index, tuple) else (index,)
            components = tuple(operator.index(item) for item in items)
        return self.a, components

    def __getitem__(self, index: Any) -> Any:
        components = _lane_index(index, self.a.ndim)
        state: _LaneState = _tls.state
        if components is None:
            result = self.a[index]
            if isinstance(result, np.ndarray):
                return _LaneArray(result, self.run)  # a view: reading it is the event
            if state.replaying():
                return state.replayed()
            state.record("value", result)
            return result
        if state.replaying():
            return Lanes(state.replayed())
        values = self.a[components]
        state.record("lanes", values)
        return Lanes(values)

    def __setitem__(self, index: Any, value: Any) -> None:
        state: _LaneState = _tls.state
        if state.replaying():
            state.replayed()  # the parent run stored it
            return
        self._store(index, value)
        state.record("none")

    def _store(self, index: Any, value: Any) -> None:
        components = _lane_index(index, self.a.ndim)
        target = index if components is None else components
        stored = _store_value(value)
        if components is None and isinstance(value, Lanes):
            # every thread stores to the same place: fine if they agree, else a race
            # whose per-thread outcome (the last thread's value) NumPy would not give
            if not _uniform(value.v):
                raise _Unsupported("threads store different values at the same place")
            stored = value.v[0]
        self.run.log.record(self.a, target)
        self.a[target] = stored


class _LaneShared:
    """A ``cuda.shared.array`` in the vectorised strategy: one array per block."""

    __slots__ = ("state", "storage")
    logged = True

    def __init__(self, storage: npt.NDArray[Any], state: _LaneState) -> None:
        self.storage = storage
        self.state = state

    @property
    def shape(self) -> tuple[int, ...]:
        return self.storage.shape[1:]

    @property
    def ndim(self) -> int:
        return self.storage.ndim - 1

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def dtype(self) -> np.dtype[Any]:
        return self.storage.dtype

    def __len__(self) -> int:
        return int(self.storage.shape[1])

    def _rows(self) -> npt.NDArray[np.int64]:
        return self.state.lanes.block_rel

    def _components(self, index: Any) -> tuple[Any, ...]:
        items = index if isinstance(index, tuple) else (index,)
        components = _lane_index(index, self.ndim)
        if components is None:
            if len(items) != self.ndim:
                raise _Unsupported("slicing shared or local memory")
            components = tuple(operator.index(item) for item in items)
        return (self._rows(), *components)

    def _resolve(self, index: Any, state: _LaneState) -> tuple[npt.NDArray[Any], tuple[Any, ...]]:
        return self.storage, self._components(index)

    def __getitem__(self, index: Any) -> Lanes:
        state = self.state
        if self.logged and state.replaying():
            return Lanes(state.replayed())
        values = self.storage[self._components(index)]
        if self.logged:
            state.record("lanes", values)
        return Lanes(values)

    def __setitem__(self, index: Any, value: Any) -> None:
        state = self.state
        if self.logged and state.replaying():
            state.replayed()  # the parent run stored it
            return
        components = self._components(index)
        stored = _store_value(value)
        if self.logged:
            state.run.log.record(self.storage, components)
        self.storage[components] = stored
        if self.logged:
            state.record("none")


class _LaneLocal(_LaneShared):
    """A ``cuda.local.array`` in the vectorised strategy: one array per thread."""

    __slots__ = ()
    logged = False

    def _rows(self) -> npt.NDArray[np.int64]:
        return self.state.positions


def _wrap_for_lanes(value: Any, run: _ChunkRun) -> Any:
    if isinstance(value, np.ndarray):
        return _LaneArray(value, run)
    if isinstance(value, tuple):
        items = [_wrap_for_lanes(item, run) for item in value]
        return tuple(items) if type(value) is tuple else type(value)(*items)  # namedtuples
    return value


# --------------------------------------------------------------------------------------
# atomics


def _inc(current: Any, value: Any) -> Any:
    return np.where(current >= value, 0, current + 1).astype(np.asarray(current).dtype)


def _dec(current: Any, value: Any) -> Any:
    current = np.asarray(current)
    return np.where((current == 0) | (current > value), value, current - 1).astype(current.dtype)


def _exch(current: Any, value: Any) -> Any:
    return value


def _cas(current: Any, expected: Any, value: Any) -> Any:
    return np.where(current == expected, value, current)


# atomic.max/min keep the stored value unless the new one is strictly greater (smaller),
# as numba does: a NaN value is ignored and a stored NaN stays (comparisons with NaN are
# false). nanmax/nanmin also replace a stored NaN.


def _max(current: Any, value: Any) -> Any:
    return np.where(value > current, value, current)


def _min(current: Any, value: Any) -> Any:
    return np.where(value < current, value, current)


def _scan_keeping_nan(ufunc: np.ufunc) -> Callable[[npt.NDArray[Any]], npt.NDArray[Any]]:
    """The running results of ``_max``/``_min`` (``ufunc`` is fmax/fmin) over a sequence
    whose first item is the stored value."""

    def scan(sequence: npt.NDArray[Any]) -> npt.NDArray[Any]:
        if sequence.dtype.kind in "fc" and np.isnan(sequence[0]):
            return np.full_like(sequence, sequence[0])  # a stored NaN stays
        return ufunc.accumulate(sequence)  # fmax/fmin skip NaN values

    return scan


#: name -> (elementwise function, an exact sequential scan of a sequence whose first
#: item is the stored value, or None)
_ATOMIC_OPS: Final[
    dict[str, tuple[Callable[..., Any], Callable[[npt.NDArray[Any]], npt.NDArray[Any]] | None]]
] = {
    "add": (np.add, np.add.accumulate),
    "sub": (np.subtract, np.subtract.accumulate),
    "max": (_max, _scan_keeping_nan(np.fmax)),
    "min": (_min, _scan_keeping_nan(np.fmin)),
    "nanmax": (np.fmax, np.fmax.accumulate),
    "nanmin": (np.fmin, np.fmin.accumulate),
    "and_": (np.bitwise_and, np.bitwise_and.accumulate),
    "or_": (np.bitwise_or, np.bitwise_or.accumulate),
    "xor": (np.bitwise_xor, np.bitwise_xor.accumulate),
    "exch": (_exch, None),
    "inc": (_inc, None),
    "dec": (_dec, None),
    "cas": (_cas, None),
}


def _atomic_scalar_index(index: Any) -> Any:
    if isinstance(index, tuple):
        return tuple(operator.index(item) for item in index)
    return operator.index(index)


# --------------------------------------------------------------------------------------
# the state a body sees through the ``cuda`` namespace

_tls = threading.local()


def _state() -> _ThreadState | _LaneState:
    state: _ThreadState | _LaneState | None = getattr(_tls, "state", None)
    if state is None:
        raise RuntimeError(
            "pdc_core.cuda functions can only be called inside a kernel that pdc runs on "
            "the host (a @kernel launched on the cpu backend, or pdc_core.cuda.simulate); "
            "on a GPU backend they are compiled by numba instead"
        )
    return state


class _ThreadState:
    """What one simulated thread sees (threads strategy)."""

    __slots__ = ("barrier", "base", "block", "block_rel", "locals", "run", "thread")

    def __init__(self, run: _ChunkRun) -> None:
        self.run = run
        self.barrier: _BlockBarrier | None = None
        self.block_rel = -1
        self.block: tuple[np.int64, ...] = ()
        self.base: tuple[np.int64, ...] = ()
        self.thread: tuple[np.int64, ...] = ()
        self.locals: dict[Any, npt.NDArray[Any]] | None = None

    def move(self, block_rel: int, thread: tuple[np.int64, ...]) -> None:
        """Become thread ``thread`` of block ``block_rel`` (states are reused: it is cheaper)."""
        if block_rel != self.block_rel:
            run = self.run
            self.block_rel = block_rel
            self.block = run.unravel_block(run.first_block + block_rel)
            self.base = tuple(b * d for b, d in zip(self.block, run.block_np, strict=True))
        self.thread = thread
        self.locals = None

    def thread_idx(self, axis: int) -> Any:
        return self.thread[axis]

    def block_idx(self, axis: int) -> Any:
        return self.block[axis]

    def grid(self, ndim: int) -> Any:
        if ndim == 1:
            return self.base[0] + self.thread[0]
        return tuple(self.base[a] + self.thread[a] for a in range(ndim))

    def laneid(self) -> Any:
        return self.run.thread_linear(self.thread) % warpsize

    def shared_array(self, shape: tuple[int, ...], dtype: np.dtype[Any], key: Any) -> Any:
        return self.run.shared_storage(key, shape, dtype)[self.block_rel]

    def local_array(self, shape: tuple[int, ...], dtype: np.dtype[Any], key: Any) -> Any:
        if self.locals is None:
            self.locals = {}
        array = self.locals.get(key)
        if array is None:
            array = self.locals[key] = np.zeros(shape, dtype)
        return array

    def _barrier(self, value: int) -> int:
        if self.barrier is None:
            if self.run.threads_per_block == 1:
                return value
            self.run.undetected_barrier()
        assert self.barrier is not None
        return self.barrier.wait(value)

    def syncthreads(self) -> None:
        self._barrier(0)

    def syncthreads_count(self, predicate: Any) -> Any:
        return np.int64(self._barrier(1 if predicate else 0))

    def syncthreads_and(self, predicate: Any) -> Any:
        return np.int64(self._barrier(1 if predicate else 0) == self.run.threads_per_block)

    def syncthreads_or(self, predicate: Any) -> Any:
        return np.int64(self._barrier(1 if predicate else 0) > 0)

    def atomic(self, name: str, array: Any, index: Any, values: tuple[Any, ...]) -> Any:
        function, _ = _ATOMIC_OPS[name]
        target = np.asarray(array) if not isinstance(array, np.ndarray) else array
        position = _atomic_scalar_index(index)
        dtype = target.dtype
        cast = tuple(np.asarray(value).astype(dtype) for value in values)
        with self.run.atomic_lock, np.errstate(over="ignore", invalid="ignore"):
            old = target[position]
            target[position] = function(np.asarray(old), *cast)
        return old


class _LaneSet:
    """A set of threads of a chunk, in CUDA order: block-relative index and thread index."""

    __slots__ = ("block_rel", "thread_lin")

    def __init__(self, block_rel: npt.NDArray[np.int64], thread_lin: npt.NDArray[np.int64]):
        self.block_rel = block_rel
        self.thread_lin = thread_lin

    @property
    def n(self) -> int:
        return int(self.block_rel.shape[0])

    def take(self, positions: npt.NDArray[np.intp]) -> _LaneSet:
        return _LaneSet(self.block_rel[positions], self.thread_lin[positions])

    def split_positions(self, key: npt.NDArray[Any]) -> list[npt.NDArray[np.intp]]:
        """The positions of each group of lanes with equal ``key``, in lane order,
        groups ordered by their first lane."""
        if key.dtype == np.bool_:
            parts = [np.flatnonzero(key), np.flatnonzero(~key)]
            parts.sort(key=lambda positions: positions[0] if len(positions) else self.n)
            return [positions for positions in parts if len(positions)]
        raw = np.ascontiguousarray(key).view(np.uint8).reshape(self.n, -1)
        _, first, inverse = np.unique(raw, axis=0, return_index=True, return_inverse=True)
        groups = len(first)
        rank = np.empty(groups, np.int64)
        rank[np.argsort(first, kind="stable")] = np.arange(groups)
        lane_group = rank[inverse.reshape(-1)]
        order = np.argsort(lane_group, kind="stable")
        bounds = np.cumsum(np.bincount(lane_group, minlength=groups))[:-1]
        return list(np.split(order, bounds))

    def split(self, key: npt.NDArray[Any], limit: int | None) -> list[_LaneSet] | None:
        """Groups of lanes with equal ``key`` (in lane order), ordered by their first lane.

        None when there are more than ``limit`` groups.
        """
        if key.dtype == np.bool_:
            parts = [np.flatnonzero(key), np.flatnonzero(~key)]
            parts.sort(key=lambda positions: positions[0] if len(positions) else self.n)
            return [self.take(positions) for positions in parts if len(positions)]
        raw = np.ascontiguousarray(key).view(np.uint8).reshape(self.n, -1)
        _, first, inverse = np.unique(raw, axis=0, return_index=True, return_inverse=True)
        groups = len(first)
        if limit is not None and groups > limit:
            return None
        rank = np.empty(groups, np.int64)
        rank[np.argsort(first, kind="stable")] = np.arange(groups)
        lane_group = rank[inverse.reshape(-1)]
        order = np.argsort(lane_group, kind="stable")
        bounds = np.cumsum(np.bincount(lane_group, minlength=groups))[:-1]
        return [self.take(positions) for positions in np.split(order, bounds)]

    def halves(self, whole_blocks: bool) -> list[_LaneSet] | None:
        if whole_blocks:
            blocks = np.unique(self.block_rel)
            if len(blocks) < 2:
                return None
            low = np.isin(self.block_rel, blocks[: len(blocks) // 2])
            return [self.take(np.flatnonzero(low)), self.take(np.flatnonzero(~low))]
        if self.n < 2:
            return None
        middle = self.n // 2
        return [self.take(np.arange(middle)), self.take(np.arange(middle, self.n))]


class _LaneState:
    """What a vectorised run sees: every value per thread is a :class:`Lanes`."""

    def __init__(self, run: _ChunkRun, lanes: _LaneSet) -> None:
        self.run = run
        self.lanes = lanes
        self.n = lanes.n
        self.positions = np.arange(self.n)
        self._cache: dict[Any, Any] = {}
        self.local_arrays: dict[Any, _LaneLocal] = {}
        # Set when the run is one group of a barrier kernel's block (see _LaneGroups):
        # ``events`` is what every memory access, barrier and print gave this run, in
        # order; a run split off another first replays its parent's ``replay`` (its
        # lanes at ``replay_positions``) without touching memory, then runs live.
        self.group: _LaneGroups | None = None
        self.events: list[tuple[str, Any]] | None = None
        self.replay: list[tuple[str, Any]] | None = None
        self.replay_positions: npt.NDArray[np.intp] | None = None
        self.cursor = 0

    def replaying(self) -> bool:
        """True while this run re-traces events its parent already performed."""
        return self.replay is not None and self.cursor < len(self.replay)

    def replayed(self) -> Any:
        """The next event's value as the parent saw it, for this run's lanes."""
        assert self.replay is not None
        assert self.events is not None
        kind, value = self.replay[self.cursor]
        self.cursor += 1
        if kind == "lanes":
            value = value[self.replay_positions]
        self.events.append((kind, value))
        return value

    def record(self, kind: str, value: Any = None) -> None:
        if self.events is not None:
            self.events.append((kind, value))

    def _axis(self, which: str, axis: int) -> Lanes:
        key = (which, axis)
        cached = self._cache.get(key)
        if cached is None:
            run = self.run
            if which == "thread":
                linear = self.lanes.thread_lin
                extents = run.block3
            else:
                linear = self.lanes.block_rel + run.first_block
                extents = run.grid3
            stride = math.prod(extents[:axis])
            cached = self._cache[key] = Lanes((linear // stride) % extents[axis])
        return cached

    def thread_idx(self, axis: int) -> Any:
        return self._axis("thread", axis)

    def block_idx(self, axis: int) -> Any:
        return self._axis("block", axis)

    def grid(self, ndim: int) -> Any:
        key = ("grid", ndim)
        cached = self._cache.get(key)
        if cached is None:
            bdim = self.run.block3
            cached = tuple(
                Lanes(self._axis("block", a).v * bdim[a] + self._axis("thread", a).v)
                for a in range(ndim)
            )
            self._cache[key] = cached
        return cached[0] if ndim == 1 else cached

    def laneid(self) -> Any:
        return Lanes(self.lanes.thread_lin % warpsize)

    def shared_array(self, shape: tuple[int, ...], dtype: np.dtype[Any], key: Any) -> Any:
        return _LaneShared(self.run.shared_storage(key, shape, dtype), self)

    def local_array(self, shape: tuple[int, ...], dtype: np.dtype[Any], key: Any) -> Any:
        array = self.local_arrays.get(key)
        if array is None:
            storage = np.zeros((self.n, *shape), dtype)
            array = self.local_arrays[key] = _LaneLocal(storage, self)
        return array

    def _block_complete(self) -> bool:
        cached = self._cache.get("complete")
        if cached is None:
            counts = np.bincount(self.lanes.block_rel)
            cached = self._cache["complete"] = bool(
                ((counts == 0) | (counts == self.run.threads_per_block)).all()
            )
        return bool(cached)

    def _barrier(self) -> None:
        if self.group is not None:
            if self.replaying():
                self.replayed()
            else:
                self.group.arrive(self, None)
                self.record("none")
            return
        if self._block_complete():
            return
        if not self.run.barrier_kernel:
            self.run.undetected_barrier()
        raise _NeedThreads("a barrier was reached by only part of a block (divergent code)")

    def syncthreads(self) -> None:
        self._barrier()

    def _block_counts(self, predicate: Any) -> npt.NDArray[np.int64]:
        truth = (
            predicate.v != 0 if isinstance(predicate, Lanes) else np.full(self.n, bool(predicate))
        )
        if self.group is not None:
            if self.replaying():
                replayed: npt.NDArray[np.int64] = self.replayed()
                return replayed
            arrived: npt.NDArray[np.int64] = self.group.arrive(self, truth)
            self.record("lanes", arrived)
            return arrived
        self._barrier()
        counts = np.bincount(self.lanes.block_rel, weights=truth, minlength=1).astype(np.int64)
        return counts[self.lanes.block_rel]

    def syncthreads_count(self, predicate: Any) -> Any:
        return Lanes(self._block_counts(predicate))

    def syncthreads_and(self, predicate: Any) -> Any:
        counts = self._block_counts(predicate)
        return Lanes((counts == self.run.threads_per_block).astype(np.int64))

    def syncthreads_or(self, predicate: Any) -> Any:
        return Lanes((self._block_counts(predicate) > 0).astype(np.int64))

    def atomic(self, name: str, array: Any, index: Any, values: tuple[Any, ...]) -> Any:
        if not isinstance(array, _LaneArray | _LaneShared):
            raise _Unsupported(f"an atomic operation on a {type(array).__name__}")
        base, components = array._resolve(index, self)
        n = self.n
        if len(components) != base.ndim:
            raise IndexError(f"an atomic on a {base.ndim}-d array needs {base.ndim} indices")
        normalized = []
        for component, extent in zip(components, base.shape, strict=True):
            lanes = np.broadcast_to(np.asarray(component, dtype=np.int64), (n,))
            if ((lanes < -extent) | (lanes >= extent)).any():
                raise IndexError(f"atomic index out of bounds for an axis of size {extent}")
            normalized.append(np.where(lanes < 0, lanes + extent, lanes))
        target = tuple(normalized)
        dtype = base.dtype
        operands = [
            np.broadcast_to(np.asarray(_store_value(value)).astype(dtype), (n,)) for value in values
        ]
        logged = not isinstance(array, _LaneLocal)
        if logged and self.replaying():
            return Lanes(self.replayed())
        if logged:
            self.run.log.record(base, target)
        function, accumulate = _ATOMIC_OPS[name]
        key = np.ravel_multi_index(target, base.shape) if base.ndim else np.zeros(n, np.intp)
        order = np.argsort(key, kind="stable")
        sorted_key = key[order]
        starts = np.flatnonzero(np.r_[True, sorted_key[1:] != sorted_key[:-1]])
        sizes = np.diff(np.r_[starts, n])
        old = np.empty(n, dtype)
        with np.errstate(over="ignore", invalid="ignore"):
            if accumulate is not None and len(starts) < int(sizes.max()):
                # few targets, many threads each: an exact sequential scan per target
                for start, size in zip(starts.tolist(), sizes.tolist(), strict=True):
                    members = order[start : start + size]
                    where = tuple(int(c[members[0]]) for c in target)
                    sequence = np.concatenate(([base[where]], operands[0][members]))
                    scanned = accumulate(sequence.astype(dtype, copy=False))
                    old[members] = scanned[:-1]
                    base[where] = scanned[-1]
            else:
                # in rounds: round r applies the r-th thread (in lane order) of each target
                for rank in range(int(sizes.max())):
                    members = order[starts[sizes > rank] + rank]
                    where = tuple(c[members] for c in target)
                    current = base[where]
                    old[members] = current
                    base[where] = function(current, *(op[members] for op in operands))
        if logged:
            self.record("lanes", old)
        return Lanes(old)


# --------------------------------------------------------------------------------------
# barrier kernels, vectorised: groups of lanes that meet at barriers


class _LaneGroups:
    """The vectorised runs of a barrier kernel's chunk: groups of lanes, each running
    the body on an OS thread of its own, that wait for each other at every barrier.

    It starts as one run of every lane. Where its lanes diverge, the run ends and one
    run per group of agreeing lanes takes its place: each first replays what its
    parent did (the values every read, atomic and barrier gave, for its own lanes;
    no store, print or wait is repeated), which brings it, with the parent's locals,
    to the branch, and then runs live. A barrier is passed when every live run has
    reached one (a run that returned no longer takes part, as a thread that exited),
    so each group runs only to the next barrier, and every block's threads meet there
    whichever groups they are in. Runs take turns (one baton, handed over at barriers
    and at the end of a run), so stores and the undo log are never concurrent.
    """

    def __init__(self, run: _ChunkRun, body: Any, args: tuple[Any, ...]) -> None:
        self.run = run
        self.body = body
        self.args = args
        self.turn = threading.Condition()  # its lock is the baton
        self.parties = 0  # live runs
        self.arrived: list[tuple[_LaneState, npt.NDArray[Any] | None]] = []
        self.results: dict[int, npt.NDArray[np.int64]] = {}
        self.generation = 0
        self.threads = 0  # OS threads not finished
        self.splits = 0
        self.failure: tuple[str, BaseException | None] | None = None

    def execute(self, lanes: _LaneSet) -> None:
        """Run the body over ``lanes``; raise _NeedThreads (the stores stay, to be
        undone by the caller) when the groups cannot finish vectorised."""
        with self.turn:
            self._spawn(_LaneState(self.run, lanes), None, None)
            try:
                self.turn.wait_for(lambda: self.threads == 0)
            except BaseException:  # interrupted: no run outlives the launch
                self._fail("interrupted", None)
                self.turn.wait_for(lambda: self.threads == 0)
                raise
        if self.failure is not None:
            reason, cause = self.failure
            raise _NeedThreads(reason) from cause

    def _spawn(
        self,
        state: _LaneState,
        replay: list[tuple[str, Any]] | None,
        positions: npt.NDArray[np.intp] | None,
    ) -> None:
        # called with the baton held
        state.group = self
        state.events = []
        state.replay = replay
        state.replay_positions = positions
        self.parties += 1
        self.threads += 1
        self.run.launch.lane_runs += 1
        thread = threading.Thread(
            target=self._main, args=(state,), name="pdc-sim-lanes", daemon=True
        )
        thread.start()

    def _main(self, state: _LaneState) -> None:
        with self.turn:
            try:
                self._body(state)
            finally:
                self.threads -= 1
                self.turn.notify_all()

    def _body(self, state: _LaneState) -> None:
        # with the baton held
        if self.failure is not None:
            self._leave()
            return
        _tls.state = state
        try:
            with np.errstate(divide="raise", over="raise", invalid="raise", under="ignore"):
                self.body(*self.args)
        except _Diverge as divergence:
            self._split(state, divergence.key)
            return
        except _Aborted:
            return
        except _LaneSignal as exc:  # _Unsupported, _UndoOverflow (kept as the cause)
            self._fail(str(exc) or type(exc).__name__, exc)
        except Exception as exc:
            self._fail(f"{type(exc).__name__}: {exc}", exc)
        finally:
            _tls.state = None
        self._leave()

    def _split(self, state: _LaneState, key: npt.NDArray[Any]) -> None:
        parts = state.lanes.split_positions(key)
        if len(parts) < 2:
            self._fail("a divergence that does not split the threads", None)
            self._leave()
            return
        self.splits += 1
        if self.parties - 1 + len(parts) > MAX_GROUPS or self.splits > MAX_RUNS:
            self._fail(f"threads diverge into more than {MAX_GROUPS} paths", None)
            self._leave()
            return
        assert state.events is not None
        self.parties -= 1  # the children take the parent's place at the next barrier
        for positions in parts:
            child = _LaneState(self.run, state.lanes.take(positions))
            self._spawn(child, state.events, positions)

    def _fail(self, reason: str, cause: BaseException | None) -> None:
        if self.failure is None:
            self.failure = (reason, cause)
        self.turn.notify_all()  # runs waiting at a barrier stop

    def _leave(self) -> None:
        self.parties -= 1
        if self.arrived and len(self.arrived) == self.parties:
            self._release()

    def arrive(self, state: _LaneState, truth: npt.NDArray[Any] | None) -> Any:
        """Wait at a barrier until every live run is at one; the block counts of
        ``truth`` (syncthreads_count and the like) for this run's lanes."""
        if self.failure is not None:
            raise _Aborted
        generation = self.generation
        self.arrived.append((state, truth))
        if len(self.arrived) == self.parties:
            self._release()
        else:
            self.turn.wait_for(lambda: self.generation != generation or self.failure is not None)
            if self.generation == generation:
                raise _Aborted
        return self.results.pop(id(state), None)

    def _release(self) -> None:
        counted = [(state, truth) for state, truth in self.arrived if truth is not None]
        self.results = {}
        if counted:
            rows = np.concatenate([state.lanes.block_rel for state, _ in counted])
            weights = np.concatenate([truth for _, truth in counted])
            counts = np.bincount(rows, weights=weights, minlength=self.run.blocks)
            counts = counts.astype(np.int64)
            for state, _ in counted:
                self.results[id(state)] = counts[state.lanes.block_rel]
        self.arrived = []
        self.generation += 1
        self.turn.notify_all()


# --------------------------------------------------------------------------------------
# barriers of the threads strategy


class _BlockBarrier:
    """``__syncthreads()`` for the OS threads of one block.

    Threads that have returned from the body no longer take part (as on GPUs since
    Volta); the barrier also sums a per-thread value, for ``syncthreads_count``.
    """

    def __init__(self, parties: int, abort: threading.Event) -> None:
        self._condition = threading.Condition()
        self._parties = parties
        self._arrived = 0
        self._sum = 0
        self._result = 0
        self._generation = 0
        self._abort = abort

    def wait(self, value: int) -> int:
        with self._condition:
            if self._abort.is_set():
                raise _Aborted
            generation = self._generation
            self._arrived += 1
            self._sum += value
            if self._arrived == self._parties:
                self._release()
            else:
                self._condition.wait_for(
                    lambda: self._generation != generation or self._abort.is_set()
                )
                if self._generation == generation:
                    raise _Aborted
            return self._result

    def leave(self) -> None:
        with self._condition:
            self._parties -= 1
            if self._arrived and self._arrived == self._parties:
                self._release()

    def _release(self) -> None:
        self._result = self._sum
        self._arrived = 0
        self._sum = 0
        self._generation += 1
        self._condition.notify_all()

    def break_(self) -> None:
        with self._condition:
            self._condition.notify_all()


# --------------------------------------------------------------------------------------
# lane-aware replacements of math, numpy scalar types and a few builtins


class _Caster:
    """A NumPy scalar type that also converts per-thread values (``float32(x)``)."""

    __slots__ = ("dtype", "type")

    def __init__(self, scalar_type: type[np.generic]) -> None:
        self.type = scalar_type
        self.dtype: np.dtype[Any] = np.dtype(scalar_type)

    def __call__(self, value: Any = 0) -> Any:
        if isinstance(value, Lanes):
            return Lanes(value.v.astype(self.dtype))
        return self.type(value)

    def __repr__(self) -> str:
        return f"<per-thread {self.dtype} conversion>"


_SCALAR_TYPE_NAMES: Final = (
    "bool_",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "intp",
    "uintp",
    "float16",
    "float32",
    "float64",
    "double",
    "single",
    "complex64",
    "complex128",
)
_CASTERS: Final[dict[type, _Caster]] = {
    getattr(np, name): _Caster(getattr(np, name)) for name in _SCALAR_TYPE_NAMES
}


class _LaneNumpy:
    """``numpy`` as a vectorised body sees it: scalar types also convert per-thread values."""

    def __getattr__(self, name: str) -> Any:
        value = getattr(np, name)
        if isinstance(value, type) and value in _CASTERS:
            return _CASTERS[value]
        return value


def _math_function(name: str, ufunc: Any, to_int: bool = False, arity: int = 1) -> Any:
    """``math.<name>`` as kernel bodies see it in both strategies: as on a GPU, where
    math never raises, a domain or range error gives NaN or inf (numba's results)
    instead of ``ValueError``/``OverflowError``."""
    original = getattr(math, name)

    def function(*args: Any) -> Any:
        if not any(isinstance(arg, Lanes) for arg in args):
            try:
                return original(*args)
            except (ValueError, OverflowError):
                if to_int or len(args) != arity or any(isinstance(a, complex) for a in args):
                    raise  # no float result to give (floor(inf) has no int)
                with np.errstate(all="ignore"):
                    return float(ufunc(*(np.float64(arg) for arg in args)))
        if len(args) != arity:
            raise _Unsupported(f"math.{name} with {len(args)} arguments")
        operands = []
        for arg in args:
            value = _operand(arg)
            array = np.asarray(value)
            if array.dtype.kind == "c":
                raise TypeError(f"math.{name} does not accept complex numbers")
            operands.append(array.astype(np.float64))
        with np.errstate(all="ignore"):  # NaN or inf where Python's math would raise
            result = ufunc(*operands)
        if to_int:
            return Lanes(result.astype(np.int64))
        return Lanes(result)

    function.__name__ = name
    return function


_MATH_FUNCTIONS: Final[dict[str, Any]] = {
    name: _math_function(name, ufunc, to_int, arity)
    for name, ufunc, to_int, arity in (
        ("sqrt", np.sqrt, False, 1),
        ("exp", np.exp, False, 1),
        ("exp2", np.exp2, False, 1),
        ("expm1", np.expm1, False, 1),
        ("log", np.log, False, 1),
        ("log2", np.log2, False, 1),
        ("log10", np.log10, False, 1),
        ("log1p", np.log1p, False, 1),
        ("sin", np.sin, False, 1),
        ("cos", np.cos, False, 1),
        ("tan", np.tan, False, 1),
        ("asin", np.arcsin, False, 1),
        ("acos", np.arccos, False, 1),
        ("atan", np.arctan, False, 1),
        ("atan2", np.arctan2, False, 2),
        ("sinh", np.sinh, False, 1),
        ("cosh", np.cosh, False, 1),
        ("tanh", np.tanh, False, 1),
        ("asinh", np.arcsinh, False, 1),
        ("acosh", np.arccosh, False, 1),
        ("atanh", np.arctanh, False, 1),
        ("fabs", np.fabs, False, 1),
        ("floor", np.floor, True, 1),
        ("ceil", np.ceil, True, 1),
        ("trunc", np.trunc, True, 1),
        ("copysign", np.copysign, False, 2),
        ("hypot", np.hypot, False, 2),
        ("pow", np.power, False, 2),
        ("fmod", np.fmod, False, 2),
        ("degrees", np.degrees, False, 1),
        ("radians", np.radians, False, 1),
        ("isnan", np.isnan, False, 1),
        ("isinf", np.isinf, False, 1),
        ("isfinite", np.isfinite, False, 1),
    )
    if hasattr(math, name)
}
_MATH_BY_IDENTITY: Final[dict[int, Any]] = {
    id(getattr(math, name)): function for name, function in _MATH_FUNCTIONS.items()
}


def _kernel_round(number: Any, ndigits: Any = None) -> Any:
    """``round`` as kernel bodies see it: where scaling a float by ``10**ndigits``
    overflows, the value itself (numba's result; NumPy's round gives inf or NaN)."""
    if ndigits is None:
        return builtins.round(number)
    values = number.v if isinstance(number, Lanes) else number
    if not isinstance(values, np.floating | np.ndarray) or values.dtype.kind != "f":
        return builtins.round(number, ndigits)
    digits = operator.index(ndigits) if not isinstance(ndigits, Lanes) else ndigits.v
    with np.errstate(all="ignore"):
        rounded = np.round(values, digits) if not isinstance(digits, np.ndarray) else None
        if rounded is None:
            raise _Unsupported("round() to a per-thread number of digits")
        kept = np.where(np.isfinite(values) & ~np.isfinite(rounded), values, rounded)
    if isinstance(number, Lanes):
        return Lanes(kept.astype(values.dtype, copy=False))
    return values.dtype.type(kept)


class _LaneMath:
    """``math`` as kernel bodies see it: functions of per-thread values vectorise, and
    domain errors give NaN or inf as on a GPU (both strategies)."""

    def __getattr__(self, name: str) -> Any:
        function = _MATH_FUNCTIONS.get(name)
        return function if function is not None else getattr(math, name)


class _LaneRange:
    __slots__ = ("count", "start", "step")

    def __init__(self, start: Any, step: Any, count: int) -> None:
        self.start, self.step, self.count = start, step, count

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[Any]:
        for k in range(self.count):
            value = self.start + k * self.step
            yield Lanes(value) if isinstance(value, np.ndarray) else value


def _range_operand(value: Any) -> Any:
    if isinstance(value, Lanes):
        if value.v.dtype.kind not in "iu":
            raise TypeError(f"{value.v.dtype} values cannot be range bounds")
        return value.v.astype(np.int64)
    return operator.index(value)


def _lane_range(*args: Any) -> Any:
    if not any(isinstance(arg, Lanes) for arg in args):
        return range(*args)
    if not 1 <= len(args) <= 3:
        raise TypeError(f"range expected 1 to 3 arguments, got {len(args)}")
    bounds = [_range_operand(arg) for arg in args]
    start, stop, step = (0, bounds[0], 1) if len(bounds) == 1 else (*bounds, 1)[:3]
    if np.any(np.asarray(step) == 0):
        raise ValueError("range() arg 3 must not be zero")
    positive = np.asarray(step) > 0
    span = np.where(positive, stop - start, start - stop)
    size = np.abs(step)
    count = np.maximum(0, (span + size - 1) // size)
    count = np.broadcast_to(count, np.broadcast(start, stop, step, count).shape)
    if count.ndim and not _uniform(np.ascontiguousarray(count)):
        raise _Diverge(np.ascontiguousarray(count))
    return _LaneRange(start, step, int(count.reshape(-1)[0]))


def _pick(name: str, better: Callable[[Any, Any], Any]) -> Callable[..., Any]:
    original = getattr(builtins, name)

    def pick(*args: Any, **kwargs: Any) -> Any:
        if len(args) < 2 or kwargs or not any(isinstance(arg, Lanes) for arg in args):
            return original(*args, **kwargs)
        result = args[0]
        for candidate in args[1:]:
            chosen = better(candidate, result)
            if isinstance(chosen, Lanes):
                result = Lanes(np.where(chosen.v, _operand(candidate), _operand(result)))
            elif chosen:
                result = candidate
        return result

    pick.__name__ = name
    return pick


def _select(condition: Any, taken: Any, kept: Any) -> Any:
    """``taken`` where the per-thread ``condition`` holds, else ``kept`` (if-conversion)."""
    values = condition.v
    truth = values if values.dtype.kind == "b" else values != 0
    return Lanes(np.where(truth, _operand(taken), _operand(kept)))


def _is_lanes(value: Any) -> bool:
    return isinstance(value, Lanes)


def _lane_int(value: Any = 0, *args: Any) -> Any:
    if isinstance(value, Lanes) and not args:
        if value.v.dtype.kind == "c":
            raise TypeError("int() cannot convert complex values")
        return Lanes(
            np.trunc(value.v).astype(np.int64)
            if value.v.dtype.kind == "f"
            else value.v.astype(np.int64)
        )
    return int(value, *args)


def _lane_float(value: Any = 0.0) -> Any:
    if isinstance(value, Lanes):
        if value.v.dtype.kind == "c":
            raise TypeError("float() cannot convert complex values")
        return Lanes(value.v.astype(np.float64))
    return float(value)


def _lane_isinstance(value: Any, kinds: Any) -> bool:
    if isinstance(value, Lanes | _LaneArray | _LaneShared):
        raise _Unsupported("isinstance() of a per-thread value or a wrapped array")
    return isinstance(value, kinds)


def _lane_type(*args: Any) -> Any:
    if len(args) == 1 and isinstance(args[0], Lanes | _LaneArray | _LaneShared):
        raise _Unsupported("type() of a per-thread value or a wrapped array")
    return type(*args)


def _lane_print_for(run: _ChunkRun) -> Callable[..., None]:
    def lane_print(
        *args: Any,
        sep: str | None = " ",
        end: str | None = "\n",
        file: Any = None,
        flush: bool = False,
    ) -> None:
        state = _state()
        if not isinstance(state, _LaneState):
            builtins.print(*args, sep=sep, end=end, file=file, flush=flush)
            return
        if state.replaying():
            state.replayed()  # the parent run printed it
            return
        state.record("none")
        sep = " " if sep is None else sep
        end = "\n" if end is None else end
        for lane in range(state.n):
            text = sep.join(str(a.v[lane] if isinstance(a, Lanes) else a) for a in args)
            run.prints.append((file, text + end))

    return lane_print


# --------------------------------------------------------------------------------------
# rebinding a body's globals for each strategy

_OUR_MODULE = "pdc_core.cuda"

# The public vocabulary module, pdc_core.cuda, which hands itself over here when it is
# imported (see bind_vocabulary). This module never imports its package: importing it
# runs pdc_core.cuda first, which imports this module and then binds itself, so no body
# is ever rebound before the binding.
_vocabulary: types.ModuleType | None = None


def bind_vocabulary(module: types.ModuleType) -> None:
    """Make ``module`` the one that bodies' ``cuda`` (pdc's or numba's) is rebound to."""
    global _vocabulary
    _vocabulary = module


def _our_cuda() -> types.ModuleType:
    if _vocabulary is None:  # pragma: no cover - pdc_core.cuda binds itself on import
        raise RuntimeError(f"{_OUR_MODULE} has not finished importing")
    return _vocabulary


def _is_numba_cuda(value: Any) -> bool:
    if not isinstance(value, types.ModuleType):
        return False
    name = value.__name__
    return name == "numba.cuda" or name.endswith(".numba.cuda")


def _numba_scalar_type(value: Any) -> type[np.generic] | None:
    module = type(value).__module__
    if (
        not module.startswith("numba")
        or isinstance(value, types.ModuleType | type)
        or callable(getattr(value, "py_func", None))
    ):
        return None
    try:
        dtype = np.dtype(str(value))
    except (TypeError, ValueError):  # a record, an array type: not a scalar type
        return None
    return dtype.type if dtype.kind in "biufc" else None


def _is_device_function(value: Any, module: str) -> bool:
    return isinstance(value, types.FunctionType) and (
        value.__module__ == module or getattr(value, "__pdc_device__", False)
    )


def _is_numba_object(value: Any) -> bool:
    return type(value).__module__.startswith("numba")


def _python_function(value: Any) -> types.FunctionType | None:
    """The Python function behind a numba dispatcher or a pdc kernel, if any."""
    inner = getattr(value, "py_func", None)
    return inner if isinstance(inner, types.FunctionType) else None


def _code_objects(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


_NAMES_CACHE: weakref.WeakKeyDictionary[types.FunctionType, frozenset[str]] = (
    weakref.WeakKeyDictionary()
)


def _names(function: types.FunctionType) -> frozenset[str]:
    cached = _NAMES_CACHE.get(function)
    if cached is None:
        cached = frozenset(
            name for code in _code_objects(function.__code__) for name in code.co_names
        )
        _NAMES_CACHE[function] = cached
    return cached


@dataclass(frozen=True)
class _Analysis:
    barrier: bool
    lanes_blocker: str | None


_ANALYSIS_CACHE: weakref.WeakKeyDictionary[types.FunctionType, _Analysis] = (
    weakref.WeakKeyDictionary()
)


def _reachable(function: types.FunctionType) -> list[types.FunctionType]:
    """The body and every Python function it reaches by a global name or a closure."""
    seen: dict[int, types.FunctionType] = {}
    stack = [function]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen[id(current)] = current
        candidates: list[Any] = [
            current.__globals__[name] for name in _names(current) if name in current.__globals__
        ]
        for cell in current.__closure__ or ():
            with contextlib.suppress(ValueError):  # an empty cell
                candidates.append(cell.cell_contents)
        for value in candidates:
            inner = value if isinstance(value, types.FunctionType) else _python_function(value)
            if inner is not None and id(inner) not in seen:
                stack.append(inner)
    return list(seen.values())


def _analyse(function: types.FunctionType) -> _Analysis:
    cached = _ANALYSIS_CACHE.get(function)
    if cached is not None:
        return cached
    barrier = False
    blocker: str | None = None
    for reached in _reachable(function):
        for code in _code_objects(reached.__code__):
            if _BARRIER_NAMES & set(code.co_names):
                barrier = True
            if blocker is not None:
                continue
            freevars = set(code.co_freevars)
            for instruction in dis.get_instructions(code):
                opname = instruction.opname
                if opname == "PUSH_EXC_INFO":
                    blocker = f"{reached.__qualname__} handles exceptions (try/except/with)"
                elif opname in ("STORE_GLOBAL", "DELETE_GLOBAL"):
                    blocker = f"{reached.__qualname__} assigns the global {instruction.argval}"
                elif opname == "STORE_DEREF" and instruction.argval in freevars:
                    blocker = f"{reached.__qualname__} assigns the nonlocal {instruction.argval}"
                if blocker is not None:
                    break
    result = _Analysis(barrier=barrier, lanes_blocker=blocker)
    _ANALYSIS_CACHE[function] = result
    return result


Target = Literal["threads", "lanes", "numba"]


class _Rebinder:
    """Copies of a body and its device functions whose globals suit one strategy."""

    def __init__(self, target: Target, run: _ChunkRun | None = None, numba_cuda: Any = None):
        self.target = target
        self.run = run
        self.numba_cuda = numba_cuda
        self.memo: dict[int, Any] = {}
        self.ours = _our_cuda()
        self.lane_builtins: dict[str, Any] = {}
        if target == "threads":
            self.lane_builtins = {"round": _kernel_round}
        if target == "lanes":
            assert run is not None
            self.lane_builtins = {
                "range": _lane_range,
                "min": _pick("min", lambda candidate, best: candidate < best),
                "max": _pick("max", lambda candidate, best: candidate > best),
                "int": _lane_int,
                "float": _lane_float,
                "print": _lane_print_for(run),
                "isinstance": _lane_isinstance,
                "type": _lane_type,
                "round": _kernel_round,
            }

    def substitute(self, value: Any, module: str) -> Any:
        target = self.target
        if value is self.ours:
            return self.numba_cuda if target == "numba" else value
        if _is_numba_cuda(value):
            return value if target == "numba" else self.ours
        if isinstance(value, types.FunctionType):
            if _is_device_function(value, module):
                return self.rebind(value, device=True)
            return value
        inner = _python_function(value)
        if inner is not None and (target != "numba" or not _is_numba_object(value)):
            # a jitted function (numba's dispatcher or a pdc kernel) called from a body
            # is a device function there, as numba compiles a kernel called by a kernel
            return self.rebind(inner, device=True)
        scalar = _numba_scalar_type(value)
        if scalar is not None and target != "numba":
            return _CASTERS.get(scalar, scalar) if target == "lanes" else scalar
        if target != "numba":
            if value is math:
                return _LaneMath()
            if callable(value) and id(value) in _MATH_BY_IDENTITY:
                return _MATH_BY_IDENTITY[id(value)]
        if target == "lanes":
            if value is np:
                return _LaneNumpy()
            if isinstance(value, type) and value in _CASTERS:
                return _CASTERS[value]
            if isinstance(value, np.ndarray):
                assert self.run is not None
                return _LaneArray(value, self.run)
        return value

    def rebind(self, function: types.FunctionType, device: bool = False) -> Any:
        done = self.memo.get(id(function))
        if done is not None:
            return done
        module = function.__module__
        frozen_globals, frozen_cells = _frozen(function)
        new_globals = dict(function.__globals__)
        new_globals.update(frozen_globals)
        # empty cells (names the enclosing function assigns later) stay shared
        fresh = tuple(
            types.CellType() if frozen is not _EMPTY else cell
            for cell, frozen in zip(function.__closure__ or (), frozen_cells, strict=True)
        )
        cells = fresh
        code = function.__code__
        if self.target == "lanes":
            converted = if_converted(function)
            if converted is not None:
                # per-thread branches that only assign locals select lane by lane
                by_name = dict(zip(code.co_freevars, cells, strict=True))
                cells = tuple(by_name[name] for name in converted.co_freevars)
                code = converted
                new_globals[SELECT] = _select
                new_globals[LANES_TEST] = _is_lanes
        copy = types.FunctionType(
            code, new_globals, function.__name__, function.__defaults__, cells or None
        )
        copy.__kwdefaults__ = function.__kwdefaults__
        copy.__qualname__ = function.__qualname__
        result: Any = copy
        if self.target == "numba" and device:
            result = self.numba_cuda.jit(device=True)(copy)
        self.memo[id(function)] = result
        for name in _names(function):
            if name in new_globals:
                new_globals[name] = self.substitute(new_globals[name], module)
            elif name in self.lane_builtins:
                new_globals[name] = self.lane_builtins[name]
        for old, new, frozen in zip(function.__closure__ or (), fresh, frozen_cells, strict=True):
            if new is not old:
                new.cell_contents = self.substitute(frozen, module)
        return result


def _constant(value: Any) -> Any:
    if type(value) is np.ndarray:
        frozen = value.copy()
        frozen.flags.writeable = False
        return frozen
    return value


#: A closure cell that was empty when its function was first launched.
_EMPTY: Final = object()

_FROZEN: weakref.WeakKeyDictionary[types.FunctionType, tuple[dict[str, Any], tuple[Any, ...]]] = (
    weakref.WeakKeyDictionary()
)
_FROZEN_LOCK = threading.Lock()


def _frozen(function: types.FunctionType) -> tuple[dict[str, Any], tuple[Any, ...]]:
    """The globals ``function`` names and its closure's values, as they were when a
    launch first reached it.

    numba reads a kernel's globals and closure variables when it compiles the kernel
    and never again (they are compile-time constants); pdc's first launch stands for
    that compilation, so rebinding the name later changes nothing. A NumPy array is
    copied then, read-only (numba copies a host array into the kernel as a constant);
    device arrays and other objects are kept by reference, as numba keeps a device
    array's pointer.
    """
    with _FROZEN_LOCK:
        snapshot = _FROZEN.get(function)
        if snapshot is None:
            values = function.__globals__
            cells = tuple(
                _constant(cell.cell_contents) if _cell_filled(cell) else _EMPTY
                for cell in function.__closure__ or ()
            )
            named = {name: _constant(values[name]) for name in _names(function) if name in values}
            snapshot = (named, cells)
            _FROZEN[function] = snapshot
    return snapshot


def _cell_filled(cell: types.CellType) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - reading is the test
    except ValueError:
        return False
    return True


# --------------------------------------------------------------------------------------
# a launch, chunk by chunk


@dataclass(frozen=True)
class SimulationStats:
    """What :func:`simulate` did.

    ``mode`` is ``"lanes"`` when every thread ran vectorised, ``"threads"`` when every
    thread ran on its own, ``"mixed"`` otherwise. ``lane_runs`` counts vectorised
    executions of the body (replays after divergence included), ``thread_calls`` calls
    of the body for a single thread, ``threaded_blocks`` blocks run with a thread per
    CUDA thread (for barriers), and ``fallbacks`` says why vectorisation was left.
    """

    mode: str
    threads: int
    lane_runs: int
    thread_calls: int
    threaded_blocks: int
    fallbacks: tuple[str, ...]


class _Launch:
    def __init__(
        self,
        body: types.FunctionType,
        grid3: tuple[int, int, int],
        block3: tuple[int, int, int],
        args: tuple[Any, ...],
        shared_mem: int,
        mode: SimulationMode,
    ) -> None:
        self.body = body
        self.name = body.__qualname__
        self.grid3 = grid3
        self.block3 = block3
        self.args = args
        self.shared_mem = shared_mem
        self.mode = mode
        self.analysis = _analyse(body)
        self.lane_runs = 0
        self.thread_calls = 0
        self.threaded_blocks = 0
        self.fallbacks: list[str] = []
        # rebound in every case: globals frozen at the first launch, numba's cuda
        # swapped for pdc's, math and round with GPU semantics
        self.thread_body: Any = _Rebinder("threads").rebind(body)

    def fallback(self, reason: str) -> None:
        if reason not in self.fallbacks:
            self.fallbacks.append(reason)


_LANE_HINTS: weakref.WeakKeyDictionary[types.FunctionType, str] = weakref.WeakKeyDictionary()


class _ChunkRun:
    """The blocks ``[first_block, first_block + blocks)`` of a launch."""

    def __init__(self, launch: _Launch, first_block: int, blocks: int) -> None:
        self.launch = launch
        self.first_block = first_block
        self.blocks = blocks
        self.grid3 = launch.grid3
        self.block3 = launch.block3
        self.block_np = tuple(np.int64(extent) for extent in launch.block3)
        self.threads_per_block = math.prod(launch.block3)
        self.barrier_kernel = launch.analysis.barrier
        self.log = _UndoLog()
        self.prints: list[tuple[Any, str]] = []
        self.shared: dict[Any, npt.NDArray[Any]] = {}
        self.dynamic: npt.NDArray[np.uint8] | None = None
        self.lock = threading.Lock()
        self.atomic_lock = threading.Lock()
        self._thread_table: list[tuple[np.int64, np.int64, np.int64]] | None = None

    # -- geometry --------------------------------------------------------------------------

    def unravel_block(self, linear: int) -> tuple[np.int64, np.int64, np.int64]:
        gx, gy, _ = self.grid3
        return (np.int64(linear % gx), np.int64(linear // gx % gy), np.int64(linear // (gx * gy)))

    def unravel_thread(self, linear: int) -> tuple[np.int64, np.int64, np.int64]:
        bx, by, _ = self.block3
        return (np.int64(linear % bx), np.int64(linear // bx % by), np.int64(linear // (bx * by)))

    def thread_table(self) -> list[tuple[np.int64, np.int64, np.int64]]:
        """``unravel_thread`` of every thread of a block, made once per chunk."""
        if self._thread_table is None:
            self._thread_table = [self.unravel_thread(t) for t in range(self.threads_per_block)]
        return self._thread_table

    def thread_linear(self, thread: tuple[Any, ...]) -> Any:
        bx, by, _ = self.block3
        return thread[0] + bx * (thread[1] + by * thread[2])

    def all_lanes(self) -> _LaneSet:
        threads = self.threads_per_block
        return _LaneSet(
            np.repeat(np.arange(self.blocks, dtype=np.int64), threads),
            np.tile(np.arange(threads, dtype=np.int64), self.blocks),
        )

    # -- memory ----------------------------------------------------------------------------

    def shared_storage(
        self, key: Any, shape: tuple[int, ...], dtype: np.dtype[Any]
    ) -> npt.NDArray[Any]:
        with self.lock:
            if shape == (0,):
                return self._dynamic(dtype)
            storage = self.shared.get(key)
            if storage is None:
                storage = self.shared[key] = np.zeros((self.blocks, *shape), dtype)
            elif storage.shape[1:] != shape or storage.dtype != dtype:
                raise ValueError(
                    f"cuda.shared.array at one place of the kernel was called with shape "
                    f"{shape} and dtype {dtype}, earlier with {storage.shape[1:]} and "
                    f"{storage.dtype}; shared arrays are static"
                )
            return storage

    def _dynamic(self, dtype: np.dtype[Any]) -> npt.NDArray[Any]:
        if self.dynamic is None:
            self.dynamic = np.zeros((self.blocks, self.launch.shared_mem), np.uint8)
        usable = self.launch.shared_mem // dtype.itemsize * dtype.itemsize
        return self.dynamic[:, :usable].view(dtype)

    def undetected_barrier(self) -> NoReturn:
        raise RuntimeError(
            f"kernel {self.launch.name!r} called a cuda.syncthreads* barrier that pdc did "
            "not find when it scanned the kernel: call it from the kernel, or from a device "
            "function the kernel names directly (not through a module attribute)"
        )

    # -- strategies --------------------------------------------------------------------------

    def run(self) -> None:
        launch = self.launch
        wants_lanes = launch.mode != "threads"
        if wants_lanes and launch.analysis.lanes_blocker is not None:
            if launch.mode == "lanes":
                raise RuntimeError(
                    f"kernel {launch.name!r} cannot run vectorised: {launch.analysis.lanes_blocker}"
                )
            launch.fallback(launch.analysis.lanes_blocker)
            wants_lanes = False
        if wants_lanes and launch.mode == "auto" and launch.body in _LANE_HINTS:
            launch.fallback(_LANE_HINTS[launch.body])
            wants_lanes = False
        if wants_lanes:
            try:
                if self.barrier_kernel and self.threads_per_block > 1:
                    self._run_lane_groups()
                else:
                    self._run_lanes()
            except _NeedThreads as exc:
                self.log.rollback(0)
                self.prints.clear()
                reason = str(exc)
                if launch.mode == "lanes":
                    raise RuntimeError(
                        f"kernel {launch.name!r} cannot run vectorised: {reason}"
                    ) from None
                launch.fallback(reason)
                _LANE_HINTS[launch.body] = reason
            else:
                self._flush_prints()
                return
        self.shared.clear()
        self.dynamic = None
        if self.barrier_kernel and self.threads_per_block > 1:
            self._run_threaded()
        else:
            self._run_sequential(self.all_lanes())

    def _flush_prints(self) -> None:
        for file, text in self.prints:
            builtins.print(text, end="", file=file)
        self.prints.clear()

    def _give_up(
        self,
        lanes: _LaneSet,
        reason: str,
        cause: BaseException | None = None,
        *,
        divergence: bool = False,
    ) -> None:
        launch = self.launch
        if divergence and launch.mode == "auto":
            # remembered per body, as for barriers: later chunks and launches run per
            # thread at once instead of replaying paths until the limit again
            _LANE_HINTS[launch.body] = reason
        if launch.mode == "lanes":
            raise RuntimeError(f"kernel {launch.name!r} cannot run vectorised: {reason}") from (
                cause
            )
        if self.barrier_kernel and self.threads_per_block > 1:
            raise _NeedThreads(reason)
        launch.fallback(reason)
        self._run_sequential(lanes)

    def _run_lanes(self) -> None:
        launch = self.launch
        rebinder = _Rebinder("lanes", run=self)
        body = rebinder.rebind(launch.body)
        args = tuple(_wrap_for_lanes(arg, self) for arg in launch.args)
        stack = [self.all_lanes()]
        runs = 0
        previous = getattr(_tls, "state", None)
        while stack:
            lanes = stack.pop()
            if runs >= MAX_RUNS:
                self._give_up(lanes, f"more than {MAX_RUNS} divergent paths", divergence=True)
                continue
            if lanes.n < MIN_GROUP and launch.mode == "auto" and not self.barrier_kernel:
                self._run_sequential(lanes)
                continue
            runs += 1
            launch.lane_runs += 1
            mark, printed = self.log.mark(), len(self.prints)
            outcome: tuple[str, Any, BaseException | None] | None = None
            _tls.state = _LaneState(self, lanes)
            try:
                with np.errstate(divide="raise", over="raise", invalid="raise", under="ignore"):
                    body(*args)
            except _Diverge as divergence:
                outcome = ("diverge", divergence.key, None)
            except _UndoOverflow:
                outcome = ("overflow", None, None)
            except _NeedThreads:
                raise
            except _Unsupported as exc:
                outcome = ("unsupported", str(exc), None)
            except Exception as exc:
                outcome = ("unsupported", f"{type(exc).__name__}: {exc}", exc)
            finally:
                _tls.state = previous
            if outcome is None:
                if not self.barrier_kernel:
                    self.log.commit(mark)
                continue
            self._undo(mark, printed)
            kind, detail, cause = outcome
            if kind == "diverge":
                limit = MAX_GROUPS if launch.mode == "auto" else None
                groups = lanes.split(detail, limit)
                if groups is None:
                    reason = f"threads diverge into more than {MAX_GROUPS} paths"
                    self._give_up(lanes, reason, divergence=True)
                elif len(groups) < 2:
                    self._give_up(lanes, "a divergence that does not split the threads")
                else:
                    stack.extend(reversed(groups))
            elif kind == "overflow":
                halves = lanes.halves(whole_blocks=self.barrier_kernel)
                if halves is None:
                    self._give_up(lanes, "a thread stores more than the undo budget")
                else:
                    stack.extend(reversed(halves))
            else:
                self._give_up(lanes, detail, cause)

    def _run_lane_groups(self) -> None:
        rebinder = _Rebinder("lanes", run=self)
        body = rebinder.rebind(self.launch.body)
        args = tuple(_wrap_for_lanes(arg, self) for arg in self.launch.args)
        previous = getattr(_tls, "state", None)
        pending = [self.all_lanes()]
        try:
            while pending:
                lanes = pending.pop()
                mark, printed = self.log.mark(), len(self.prints)
                try:
                    _LaneGroups(self, body, args).execute(lanes)
                except _NeedThreads as exc:
                    if not isinstance(exc.__cause__, _UndoOverflow):
                        raise
                    # the undo log outgrew its budget: the blocks in two halves
                    self._undo(mark, printed)
                    halves = lanes.halves(whole_blocks=True)
                    if halves is None:
                        raise _NeedThreads("a block stores more than the undo budget") from None
                    pending.extend(reversed(halves))
        finally:
            _tls.state = previous

    def _undo(self, mark: int, printed: int) -> None:
        self.log.rollback(mark)
        del self.prints[printed:]

    def _run_sequential(self, lanes: _LaneSet) -> None:
        launch = self.launch
        body = launch.thread_body
        args = launch.args
        previous = getattr(_tls, "state", None)
        threads = self.thread_table()
        state = _ThreadState(self)
        _tls.state = state
        try:
            for block_rel, thread_lin in zip(
                lanes.block_rel.tolist(), lanes.thread_lin.tolist(), strict=True
            ):
                state.move(block_rel, threads[thread_lin])
                try:
                    body(*args)
                except Exception as exc:
                    _annotate(exc, launch, state)
                    raise
        finally:
            launch.thread_calls += lanes.n
            _tls.state = previous

    def _run_threaded(self) -> None:
        launch = self.launch
        threads = self.threads_per_block
        abort = threading.Event()
        barriers = [_BlockBarrier(threads, abort) for _ in range(self.blocks)]
        errors: list[BaseException] = []
        table = self.thread_table()

        def worker(thread_lin: int) -> None:
            for block_rel in range(self.blocks):
                if abort.is_set():
                    return
                state = _ThreadState(self)
                state.move(block_rel, table[thread_lin])
                state.barrier = barriers[block_rel]
                _tls.state = state
                try:
                    launch.thread_body(*launch.args)
                except _Aborted:
                    return
                except BaseException as exc:
                    _annotate(exc, launch, state)
                    with self.lock:
                        errors.append(exc)
                    abort.set()
                    for barrier in barriers:
                        barrier.break_()
                    return
                finally:
                    barriers[block_rel].leave()
                    _tls.state = None

        workers = [
            threading.Thread(target=worker, args=(t,), name=f"pdc-sim-thread-{t}", daemon=True)
            for t in range(threads)
        ]
        for thread in workers:
            thread.start()
        for thread in workers:
            thread.join()
        launch.threaded_blocks += self.blocks
        launch.thread_calls += self.blocks * threads
        if errors:
            raise errors[0]


def _annotate(exc: BaseException, launch: _Launch, state: _ThreadState) -> None:
    block = tuple(int(v) for v in state.block)
    thread = tuple(int(v) for v in state.thread)
    exc.add_note(
        f"raised by thread {thread} of block {block} of kernel {launch.name!r} "
        "(simulated on the host by pdc)"
    )


def simulate(
    body: Callable[..., Any],
    grid: int | Sequence[int],
    block: int | Sequence[int],
    args: Sequence[Any] = (),
    *,
    shared_mem: int = 0,
    mode: SimulationMode = "auto",
) -> SimulationStats:
    """Run the Python kernel ``body`` over ``grid`` x ``block`` threads on the host.

    ``body`` is a plain function in numba.cuda style, using ``cuda.grid``,
    ``cuda.threadIdx`` and the rest of :mod:`pdc_core.cuda` (or numba's ``cuda``, which
    is swapped for pdc's). ``args`` are passed positionally: NumPy arrays (written in
    place), scalars and tuples of them. ``shared_mem`` is the byte size of dynamic shared
    memory (``cuda.shared.array(0, dtype)``). ``mode`` is ``"auto"``, ``"lanes"`` (only
    vectorised: raise ``RuntimeError`` saying why instead of running per thread) or
    ``"threads"`` (every thread on its own); see the module documentation for both
    strategies and their guarantees.

    Returns when every thread has finished. An exception raised by the body propagates
    with a note naming the thread and block; the stores of threads that completed
    before it remain, as on a GPU.
    """
    function = body if isinstance(body, types.FunctionType) else _python_function(body)
    if function is None:
        raise TypeError(f"a kernel body must be a Python function, not {body!r}")
    if mode not in _MODES:
        raise ValueError(f"mode must be one of {', '.join(_MODES)}, not {mode!r}")
    grid3 = dim3(dims(grid, "grid"))
    block_dims = dims(block, "block")
    check_block(block_dims, DEFAULT_MAX_THREADS_PER_BLOCK)
    block3 = dim3(block_dims)
    threads = math.prod(block3)
    if isinstance(shared_mem, bool) or not isinstance(shared_mem, int | np.integer):
        raise TypeError(f"shared_mem must be a number of bytes, not {shared_mem!r}")
    if shared_mem < 0:
        raise ValueError(f"shared_mem must not be negative, got {shared_mem}")
    launch = _Launch(function, grid3, block3, tuple(args), int(shared_mem), mode)
    blocks = math.prod(grid3)
    per_chunk = max(1, LANE_CHUNK // threads)
    for first in range(0, blocks, per_chunk):
        _ChunkRun(launch, first, min(per_chunk, blocks - first)).run()
    total = blocks * threads
    if launch.thread_calls == 0:
        summary = "lanes"
    elif launch.thread_calls >= total:
        summary = "threads"
    else:
        summary = "mixed"
    return SimulationStats(
        mode=summary,
        threads=total,
        lane_runs=launch.lane_runs,
        thread_calls=launch.thread_calls,
        threaded_blocks=launch.threaded_blocks,
        fallbacks=tuple(launch.fallbacks),
    )


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


# --------------------------------------------------------------------------------------
# handing a body to numba-cuda (used by GPU backends)

_NUMBA_CACHE: weakref.WeakKeyDictionary[types.FunctionType, dict[Any, Any]] = (
    weakref.WeakKeyDictionary()
)
_NUMBA_LOCK = threading.Lock()


def to_numba(body: Callable[..., Any], **jit_options: Any) -> Any:
    """``numba.cuda.jit(**jit_options)`` of ``body``, with pdc's ``cuda`` names swapped for numba's.

    For GPU backends that run Python kernel bodies through numba-cuda
    (``pip install 'pdc-cuda[numba]'``). Functions of the body's module that it calls,
    and functions marked ``@cuda.jit(device=True)``, become numba device functions.
    The dispatcher is cached per body and options; launch it as
    ``dispatcher[grid, block, stream, shared_mem](*args)``. Raises ``ImportError``
    naming the package to install when numba is missing.
    """
    function = body if isinstance(body, types.FunctionType) else _python_function(body)
    if function is None:
        raise TypeError(f"a kernel body must be a Python function, not {body!r}")
    try:
        from numba import cuda as numba_cuda
    except ImportError as exc:
        raise ImportError(
            "running Python kernel bodies on a GPU needs numba-cuda: pip install 'pdc-cuda[numba]'"
        ) from exc
    key = tuple(sorted(jit_options.items()))
    with _NUMBA_LOCK:
        per_body = _NUMBA_CACHE.setdefault(function, {})
        dispatcher = per_body.get(key)
        if dispatcher is None:
            rebound = _Rebinder("numba", numba_cuda=numba_cuda).rebind(function)
            dispatcher = per_body[key] = numba_cuda.jit(**jit_options)(rebound)
    return dispatcher
