"""The state a body sees through the ``cuda`` namespace, per thread and per group of lanes.

:class:`_ThreadState` is one simulated thread (threads strategy); :class:`_LaneState` is a
set of lanes run together (vectorised strategy), with the record of events that lets a
group replay a divergent run for its lanes without repeating a store; :class:`_LaneGroups`
runs the groups of a barrier kernel, each only to the next barrier, where all meet;
:class:`_BlockBarrier` is the threads strategy's barrier. ``_state()`` is the state of the
thread calling, and raises outside a kernel. The chunk run above is named only through
the protocol ``_BlockRun``; this module imports the floors below it only.
"""

from __future__ import annotations

import math
import threading
from typing import Any, NoReturn, Protocol

import numpy as np
import numpy.typing as npt

from ._limits import (
    MAX_GROUPS,
    MAX_RUNS,
    _Aborted,
    _Diverge,
    _LaneSignal,
    _NeedThreads,
    _tls,
    _Unsupported,
    warpsize,
)
from ._memory import (
    _ATOMIC_OPS,
    _atomic_scalar_index,
    _LaneArray,
    _LaneLocal,
    _LaneShared,
    _LoggedRun,
    _store_value,
)
from ._values import Lanes

# --------------------------------------------------------------------------------------
# what the state needs of the chunk run above it (``_engine._BlockRun`` satisfies it)


class _Counted(Protocol):
    """A launch, as the state sees it: the count of vectorised runs it made."""

    lane_runs: int


class _BlockRun(_LoggedRun, Protocol):
    """A chunk of blocks of a launch, as the threads and lanes running it see it."""

    @property
    def launch(self) -> _Counted: ...
    @property
    def first_block(self) -> int: ...
    @property
    def blocks(self) -> int: ...
    @property
    def grid3(self) -> tuple[int, int, int]: ...
    @property
    def block3(self) -> tuple[int, int, int]: ...
    @property
    def block_np(self) -> tuple[np.int64, ...]: ...
    @property
    def threads_per_block(self) -> int: ...
    @property
    def barrier_kernel(self) -> bool: ...
    @property
    def atomic_lock(self) -> threading.Lock: ...
    def unravel_block(self, linear: int) -> tuple[np.int64, np.int64, np.int64]: ...
    def thread_linear(self, thread: tuple[Any, ...]) -> Any: ...
    def shared_storage(
        self, key: Any, shape: tuple[int, ...], dtype: np.dtype[Any]
    ) -> npt.NDArray[Any]: ...
    def undetected_barrier(self) -> NoReturn: ...


# --------------------------------------------------------------------------------------
# the state a body sees through the ``cuda`` namespace


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

    def __init__(self, run: _BlockRun) -> None:
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

    def __init__(self, run: _BlockRun, lanes: _LaneSet) -> None:
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

    def __init__(self, run: _BlockRun, body: Any, args: tuple[Any, ...]) -> None:
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
