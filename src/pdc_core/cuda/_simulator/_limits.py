"""The simulator's bottom floor: its limits and modes, and the signals of the vectorised run.

The tunable limits (``LANE_CHUNK``, ``MAX_GROUPS``, ``MAX_RUNS``, ``MIN_GROUP``,
``UNDO_BUDGET``), the simulation modes, ``warpsize``, the barrier names a body is scanned
for, the control-flow signals (``BaseException``: a body's ``except Exception`` never
swallows them) and ``_tls``, the per-OS-thread slot holding the simulated thread's state.
This module imports nothing of the simulator.
"""

from __future__ import annotations

import threading
from typing import Any, Final, Literal

import numpy.typing as npt

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


#: The simulated thread running on this OS thread (``state``; set by the engine).
_tls = threading.local()
