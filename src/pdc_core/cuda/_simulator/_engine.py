"""A launch, chunk by chunk: :func:`simulate`, the strategy per chunk, and its statistics.

:func:`simulate` checks the launch, then runs the grid in chunks of at most
``LANE_CHUNK`` threads; :class:`_ChunkRun` tries the vectorised strategy (splitting at
divergence, replaying, meeting at barriers) and falls back to per-thread execution for
the threads it cannot vectorise, undoing the run's stores first, so that every outcome is
the one of running each thread on its own. :class:`SimulationStats` tells which strategy
ran. ``_ChunkRun`` satisfies the protocols the floors below name it by.
"""

from __future__ import annotations

import builtins
import math
import threading
import types
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np
import numpy.typing as npt

from ..._launch import DEFAULT_MAX_THREADS_PER_BLOCK, check_block, dim3, dims
from ._limits import (
    _MODES,
    LANE_CHUNK,
    MAX_GROUPS,
    MAX_RUNS,
    MIN_GROUP,
    SimulationMode,
    _Aborted,
    _Diverge,
    _NeedThreads,
    _tls,
    _UndoOverflow,
    _Unsupported,
)
from ._memory import _UndoLog, _wrap_for_lanes
from ._rebinding import _analyse, _python_function, _Rebinder
from ._state import _BlockBarrier, _LaneGroups, _LaneSet, _LaneState, _ThreadState

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
