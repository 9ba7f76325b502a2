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
    "run_numba_kernel",
]

INSTALL_HINT = "pip install 'pdc-cuda[numba]'"

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
    """``numba.cuda``, or ``ImportError`` naming the extra to install."""
    try:
        from numba import cuda
    except ImportError as exc:
        raise ImportError(
            "running Python kernel bodies on the cuda backend needs numba-cuda: "
            f"{INSTALL_HINT} (or write the kernel in CUDA C with kernel.source(...))"
        ) from exc
    return cuda


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
