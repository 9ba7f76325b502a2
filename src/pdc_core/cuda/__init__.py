"""numba.cuda's kernel vocabulary, for kernel bodies that run on every pdc backend.

Write kernel bodies against this module the way numba.cuda's documentation shows::

    from pdc_core import cuda, kernel

    @kernel(block=(256,))
    def scale(data, out):
        i = cuda.grid(1)
        if i < len(data):
            out[i] = data[i] * 2

On the ``cpu`` backend the body is simulated on the host (:func:`simulate`; see
:func:`simulate` for the two strategies and their guarantees). On the
``cuda`` backend it is compiled by numba-cuda (``pip install 'pdc-cuda[numba]'``),
these names being swapped for numba's own (:func:`to_numba`). A body written with
``from numba import cuda`` works too: on the cpu backend pdc swaps numba's module for
this one, and a kernel already decorated with ``numba.cuda.jit`` becomes a pdc kernel
through its Python function (``pdc_core.kernel(dispatcher)``).

Provided: ``grid``, ``gridsize``, ``threadIdx``, ``blockIdx``, ``blockDim``,
``gridDim``, ``warpsize``, ``laneid``, ``syncthreads`` (and ``_count``, ``_and``,
``_or``), ``threadfence`` (and ``_block``, ``_system``), ``shared.array``,
``local.array``, ``const.array_like``, ``atomic.{add, sub, max, min, nanmax, nanmin,
and_, or_, xor, exch, inc, dec, cas, compare_and_swap}``, the intrinsics ``popc``,
``brev``, ``clz``, ``ffs``, ``fma``, ``cbrt`` and ``selp``, and ``jit`` (its kernels
have numba's ``forall``).

Not provided (asking for one raises an ``AttributeError`` that says so): warp-level
primitives (``syncwarp``, shuffles, votes, ``activemask``, ``lanemask_lt``) and
cooperative groups (``cg``); half precision (``fp16``); ``random`` (import numba's
xoroshiro128+ generators from ``numba.cuda.random`` instead); ``libdevice``; numba's
dispatcher methods other than ``forall`` (``specialize``, ``inspect_*``,
``overloads``, ``extensions``, ...); and CUDA vector types (``float32x4``, ...).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from typing import Any

from .._kernel import Kernel, _numba_python_function
from .._publish import publish
from ._simulator import (
    Lanes,
    SimulationStats,
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
    local,
    popc,
    selp,
    shared,
    simulate,
    syncthreads,
    syncthreads_and,
    syncthreads_count,
    syncthreads_or,
    threadfence,
    threadfence_block,
    threadfence_system,
    threadIdx,
    to_numba,
    warpsize,
)
from ._simulator import bind_vocabulary as _bind_vocabulary
from ._simulator import laneid as _laneid

__all__ = [
    "Lanes",
    "SimulationStats",
    "atomic",
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
    "jit",
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


def jit(function_or_signature: Any = None, *, device: bool = False, **options: Any) -> Any:
    """numba.cuda.jit's decorator forms, making pdc kernels.

    ``@cuda.jit`` and ``@cuda.jit("void(float32[:])")`` (the signature is accepted and
    ignored) make a :class:`~pdc_core.Kernel`, launched as ``k[grid, block](...)`` or
    ``k(...)`` with an automatic configuration; other keywords (``fastmath=True``)
    are passed to the backend as kernel options. ``@cuda.jit(device=True)`` marks a
    device function: it stays a plain function, callable from kernel bodies.
    """

    def decorate(function: Callable[..., Any]) -> Any:
        function = _numba_python_function(function)  # a numba dispatcher: its function
        if device:
            function.__pdc_device__ = True  # type: ignore[attr-defined]
            return function
        return Kernel(function, options=options or None)

    if callable(function_or_signature) and not isinstance(function_or_signature, str):
        return decorate(function_or_signature)
    return decorate


_UNSUPPORTED = frozenset(
    {
        "syncwarp",
        "shfl_sync",
        "shfl_up_sync",
        "shfl_down_sync",
        "shfl_xor_sync",
        "all_sync",
        "any_sync",
        "eq_sync",
        "ballot_sync",
        "match_any_sync",
        "match_all_sync",
        "activemask",
        "lanemask_lt",
        "cg",
    }
)


#: CUDA's vector types as numba.cuda names them (float32x4, int16x2, uchar4, ...).
_VECTOR_TYPE = re.compile(
    r"^(u?int(8|16|32|64)|float(16|32|64)|u?(char|short|int|long|longlong)|half|double)"
    r"(x?[1-4])$"
)

#: numba.cuda names pdc does not simulate, each with what to do instead.
_NOT_SIMULATED = {
    "fp16": "half-precision intrinsics are not simulated; compute in float32 "
    "(np.float32) on the cpu backend, or run the kernel with numba on the cuda backend",
    "random": "pdc_core.cuda has no random module; import numba's xoroshiro128+ "
    "generators from numba.cuda.random (kernel bodies call them as device functions; on "
    "the cpu backend they run thread by thread), or pass random numbers in an array",
    "libdevice": "libdevice functions are not simulated; use the math module's "
    "functions (math.sqrt, math.exp, ...), which pdc simulates",
}


def __getattr__(name: str) -> Any:
    if name == "laneid":
        return _laneid()
    if _VECTOR_TYPE.match(name):
        raise AttributeError(
            f"pdc_core.cuda does not provide CUDA vector types (cuda.{name}); use a small "
            "array or separate scalars, or run the kernel with numba on the cuda backend"
        )
    if name in _NOT_SIMULATED:
        raise AttributeError(f"pdc_core.cuda does not simulate cuda.{name}: {_NOT_SIMULATED[name]}")
    if name in _UNSUPPORTED:
        raise AttributeError(
            f"pdc_core.cuda does not simulate cuda.{name} (warp-level primitives and "
            "cooperative groups are not supported); use shared memory with "
            "cuda.syncthreads(), or run the kernel with numba on the cuda backend"
        )
    raise AttributeError(f"module 'pdc_core.cuda' has no attribute {name!r}")


publish(__name__, globals(), __all__)


_bind_vocabulary(sys.modules[__name__])  # the simulator rebinds bodies' ``cuda`` to us
