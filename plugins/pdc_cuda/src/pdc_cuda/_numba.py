"""Python kernel bodies on CUDA through numba-cuda (the optional extra ``pdc-cuda[numba]``).

A body written numba.cuda style against :mod:`pdc_core.cuda` (``i = cuda.grid(1)``)
is compiled by ``numba.cuda.jit`` after :func:`pdc_core.cuda.to_numba` has swapped
pdc's names for numba's, and launched on the CUDA stream the call names (CuPy's current
stream without one). CuPy arrays reach numba through ``__cuda_array_interface__``
without a copy; numba-cuda and CuPy share the device's primary context.

numba-cuda can also compile a body to PTX with no GPU or driver at all
(:func:`compile_python_kernel_ptx`, NVVM from the ``nvidia-cuda-nvcc-cu12`` wheel),
which is how CI checks that a body compiles.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pdc_core.backend import Stream

from ._kernels import KernelDevice, kernel_argument
from ._launch import explicit_config
from ._streams import synchronize_stream

__all__ = [
    "INSTALL_HINT",
    "JIT_OPTIONS",
    "compile_python_kernel_ptx",
    "jit_options",
    "numba_cuda",
    "numba_numpy_mismatch",
    "run_numba_kernel",
]

INSTALL_HINT = "pip install 'pdc-cuda[numba]'"
#: The same for CUDA 13, where pdc-cuda is installed without its CUDA 12 dependencies
#: (docs/cuda-backend.md, "Installing"): numba-cuda's own cu13 extra.
CUDA13_INSTALL_HINT = "pip install 'numba-cuda[cu13]>=0.30' 'numpy<2.5'"

#: The NumPy range the ``numba`` extra declares beside numba-cuda: numba-cuda up to at
#: least 0.30.4 calls ``numpy.row_stack``, which NumPy 2.5 removed.
NUMPY_RANGE = "numpy<2.5"

#: ``numba.cuda.jit`` keywords taken from ``@kernel(options={...})``; other keys
#: (``cpu_mode`` of the cpu backend, ...) are for other backends and ignored here.
JIT_OPTIONS = frozenset(
    {
        "debug",
        "opt",
        "lineinfo",
        "fastmath",
        "max_registers",
        "cache",
        "inline",
        "link",
        "lto",
        "launch_bounds",
    }
)


def numba_cuda() -> Any:
    """``numba.cuda``, or ``ImportError`` naming the extra to install, or naming both
    versions when the installed numba-cuda cannot run with the installed NumPy."""
    try:
        from numba import cuda
    except ImportError as exc:
        raise ImportError(
            "running Python kernel bodies on the cuda backend needs numba-cuda: "
            f"{INSTALL_HINT}, or with CUDA 13 {CUDA13_INSTALL_HINT} (or write the kernel "
            "in CUDA C with kernel.source(...))"
        ) from exc
    mismatch = numba_numpy_mismatch()
    if mismatch is not None:
        raise ImportError(mismatch)
    return cuda


_numpy_checked = False


def numba_numpy_mismatch() -> str | None:
    """Why the installed numba-cuda cannot compile kernels with the installed NumPy, or
    ``None`` when it can (or numba-cuda is not installed).

    numba-cuda registers its NumPy overloads when it first compiles; 0.30.4 registers one
    for ``numpy.row_stack``, which NumPy 2.5 removed, so every compile then fails with an
    ``AttributeError`` from deep inside it. This imports that module up front (once) and
    turns the failure into one sentence naming both versions and the range that works.
    """
    global _numpy_checked
    if _numpy_checked:
        return None
    try:
        importlib.import_module("numba.cuda.np.arrayobj")
    except ImportError:
        return None  # no numba-cuda: numba_cuda() names the extra
    except AttributeError as exc:
        if "row_stack" not in str(exc):
            raise
        import numpy

        return (
            f"numba-cuda {_version('numba-cuda')} calls numpy.row_stack, which NumPy "
            f"{numpy.__version__} no longer has (NumPy 2.5 removed it): Python kernel bodies "
            f"on the cuda backend need {NUMPY_RANGE} with this numba-cuda, the range the "
            f"pdc-cuda[numba] extra declares (pip install '{NUMPY_RANGE}'), or a numba-cuda "
            "that no longer calls it"
        )
    _numpy_checked = True
    return None


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "(version unknown)"


def jit_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``numba.cuda.jit`` keywords among a kernel's ``options``."""
    return {key: value for key, value in (options or {}).items() if key in JIT_OPTIONS}


def _numba_stream(cuda: Any, raw: Any) -> Any:
    """The numba stream for a ``cupy.cuda.Stream`` (the legacy default one for ptr 0)."""
    pointer = int(raw.ptr)
    if pointer == 0:
        return cuda.legacy_default_stream()
    return cuda.external_stream(pointer)


def _numba_argument(cuda: Any, value: Any) -> Any:
    value = kernel_argument(value)
    if cuda.is_cuda_array(value):
        # No synchronization on import: the launch is queued on the stream the caller
        # ordered the array's producers on (CuPy's current stream, or the given one).
        return cuda.as_cuda_array(value, sync=False)
    return value


def run_numba_kernel(
    backend: KernelDevice,
    body: Callable[..., Any],
    grid: Sequence[int],
    block: Sequence[int],
    args: Sequence[Any],
    *,
    shared_mem: int = 0,
    stream: Stream | None = None,
    options: Mapping[str, Any] | None = None,
) -> None:
    """Compile ``body`` with numba-cuda and launch it; see ``CudaBackend.run_python_kernel``."""
    cuda = numba_cuda()
    import cupy

    from pdc_core.cuda import to_numba

    limit = backend.properties.max_threads_per_block or 1024
    grid3, block3 = explicit_config(grid, block, max_threads_per_block=limit)
    if 0 in grid3:
        return
    dispatcher = to_numba(body, **jit_options(options))
    with backend.device_context(), backend.stream_context(stream) as given:
        raw = given if given is not None else cupy.cuda.get_current_stream()
        converted = [_numba_argument(cuda, arg) for arg in args]
        dispatcher[grid3, block3, _numba_stream(cuda, raw), int(shared_mem)](*converted)
        if stream is None:
            synchronize_stream(raw)


def compile_python_kernel_ptx(
    body: Callable[..., Any],
    signature: str,
    *,
    compute_capability: tuple[int, int] = (8, 0),
    options: Mapping[str, Any] | None = None,
) -> str:
    """PTX of a numba.cuda-style ``body`` for ``signature`` (``"void(float32[:])"``).

    Needs numba-cuda (``pdc-cuda[numba]``) but no GPU or driver: it proves that a body
    written against :mod:`pdc_core.cuda` compiles for the cuda backend. One limit of
    numba-cuda 0.30: a body that calls another Python function (a device function)
    asks the current device for its compute capability while typing the call, so
    such a body compiles only where a driver is loaded.
    """
    from pdc_core.cuda import to_numba

    cuda = numba_cuda()
    dispatcher = to_numba(body, **jit_options(options))
    keywords = {
        key: value
        for key, value in jit_options(options).items()
        if key in {"debug", "lineinfo", "fastmath", "opt", "launch_bounds"}
    }
    ptx, _ = cuda.compile_ptx(dispatcher.py_func, signature, cc=compute_capability, **keywords)
    return str(ptx)
