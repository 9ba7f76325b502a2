"""Arrays as the vectorised strategy sees them, the undo log, and the atomic operations.

An argument, global or closure array (:class:`_LaneArray`) and shared or local memory
(:class:`_LaneShared`, :class:`_LaneLocal`) gather and scatter with per-thread indices;
every store of a run is logged in its :class:`_UndoLog` first, so that an undone run
leaves every array as it was (a log over ``UNDO_BUDGET`` bytes raises ``_UndoOverflow``,
and the engine splits the run). Reads and stores are recorded in the lane state, so a
replay reads them back instead of repeating them. The run and the lane state above are
named only through the protocols ``_LoggedRun``, ``_Rows`` and ``_Recorder``; this module
imports only :mod:`._limits` and :mod:`._values`.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any, Final, Protocol

import numpy as np
import numpy.typing as npt

from ._limits import UNDO_BUDGET, _tls, _UndoOverflow, _Unsupported
from ._values import _SCALARS, Lanes, _uniform

# --------------------------------------------------------------------------------------
# what lane arrays need of the run and of the lane state above them (``_engine._LoggedRun``
# and ``_state._Recorder`` satisfy these; naming those classes would close a circle)


class _LoggedRun(Protocol):
    """A chunk run, as its arrays see it: the undo log their stores are recorded in."""

    @property
    def log(self) -> _UndoLog: ...


class _Rows(Protocol):
    """A set of lanes, as shared memory sees it: each lane's block within the chunk."""

    @property
    def block_rel(self) -> npt.NDArray[np.int64]: ...


class _Recorder(Protocol):
    """The lane state running a body, as its arrays see it: its lanes, its run, and the
    record of events a replay reads back instead of repeating them."""

    @property
    def run(self) -> _LoggedRun: ...
    @property
    def lanes(self) -> _Rows: ...
    @property
    def positions(self) -> npt.NDArray[np.int64]: ...
    def replaying(self) -> bool: ...
    def replayed(self) -> Any: ...
    def record(self, kind: str, value: Any = None) -> None: ...


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

    def __init__(self, array: npt.NDArray[Any], run: _LoggedRun) -> None:
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

    def _resolve(self, index: Any, state: _Recorder) -> tuple[npt.NDArray[Any], tuple[Any, ...]]:
        components = _lane_index(index, self.a.ndim)
        if components is None:
            items = index if isinstance(index, tuple) else (index,)
            components = tuple(operator.index(item) for item in items)
        return self.a, components

    def __getitem__(self, index: Any) -> Any:
        components = _lane_index(index, self.a.ndim)
        state: _Recorder = _tls.state
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
        state: _Recorder = _tls.state
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

    def __init__(self, storage: npt.NDArray[Any], state: _Recorder) -> None:
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

    def _resolve(self, index: Any, state: _Recorder) -> tuple[npt.NDArray[Any], tuple[Any, ...]]:
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


def _wrap_for_lanes(value: Any, run: _LoggedRun) -> Any:
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
