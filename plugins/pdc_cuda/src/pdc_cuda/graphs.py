"""CUDA-graph launches of per-message work that is not resident (the public face).

::

    from pdc_cuda.graphs import In, MessageLauncher, Out

    with MessageLauncher(backend.compile_kernel(SOURCE, "scale_into")) as launcher:
        (y,) = launcher(In(x), Out(x.shape, np.float32), np.float32(2), np.uint64(x.size))

See :class:`MessageLauncher` and ``docs/cuda-backend.md`` (*CUDA graphs for per-message
work*) for the cache key, the capture mode and the lifetime guarantees.
"""

from ._graphs import (
    CupyGraphOps,
    GraphOps,
    In,
    InOut,
    LauncherStatistics,
    MessageLauncher,
    Out,
)

__all__ = [
    "CupyGraphOps",
    "GraphOps",
    "In",
    "InOut",
    "LauncherStatistics",
    "MessageLauncher",
    "Out",
]
