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

The package, bottom floor first (each module imports only the floors below it; the
layout test pins them): :mod:`._limits` (limits, modes, signals), :mod:`._values`
(:class:`Lanes`), :mod:`._memory` (arrays, undo log, atomics), :mod:`._state` (thread,
lane and block state), :mod:`._vocabulary` (the ``cuda`` names a body calls),
:mod:`._builtins` (lane-aware ``math``, scalar types, builtins), :mod:`._rebinding`,
:mod:`._engine` (:func:`simulate`) and :mod:`._numba_bridge` (:func:`to_numba`). Where a
floor must name something above it (the chunk run, the lane state) it names a small
protocol of its own instead, so that no import closes a circle.
"""

from __future__ import annotations

from ._engine import SimulationStats, simulate
from ._limits import (
    LANE_CHUNK,
    MAX_GROUPS,
    MAX_RUNS,
    MIN_GROUP,
    UNDO_BUDGET,
    SimulationMode,
    warpsize,
)
from ._numba_bridge import to_numba
from ._rebinding import Target, bind_vocabulary
from ._values import Lanes
from ._vocabulary import (
    atomic,
    blockDim,
    blockIdx,
    brev,
    cbrt,
    clz,
    const,
    ffs,
    fma,
    grid,
    gridDim,
    gridsize,
    laneid,
    local,
    popc,
    selp,
    shared,
    syncthreads,
    syncthreads_and,
    syncthreads_count,
    syncthreads_or,
    threadfence,
    threadfence_block,
    threadfence_system,
    threadIdx,
)

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
