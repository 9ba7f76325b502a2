"""Kernels from CUDA C source: compiled with ``cupy.RawModule``, launched on a stream.

:class:`CudaKernel` is what :meth:`CudaBackend.compile_kernel` returns and what a
generic ``@kernel`` decorator needs: :meth:`CudaKernel.launch` takes an explicit grid
and block, and calling the kernel with a problem size computes them
(:func:`pdc_core.launch_config`, capped by the compiled kernel's own
``max_threads_per_block``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar, cast

import numpy as np

from pdc_core import UnifiedBuffer
from pdc_core.backend import Stream

from ._exceptions import CudaCompileError
from ._launch import Dims, LaunchConfig, explicit_config, launch_config
from ._properties import CudaDeviceProperties
from ._streams import synchronize_stream

__all__ = [
    "DEFAULT_OPTIONS",
    "CudaKernel",
    "KernelCache",
    "KernelDevice",
    "compile_options",
    "kernel_argument",
    "launch_and_wait",
]


class KernelDevice(Protocol):
    """What a kernel needs of the device it was compiled for (``CudaBackend`` is one);
    the kernel layer knows no backend class."""

    @property
    def qualified_name(self) -> str:
        """``cuda:N``."""

    @property
    def properties(self) -> CudaDeviceProperties:
        """The device's properties."""

    def device_context(self) -> contextlib.AbstractContextManager[Any]:
        """The device current for CuPy inside the block."""

    def stream_context(self, stream: Stream | None) -> contextlib.AbstractContextManager[Any]:
        """``stream`` current for CuPy inside the block (its raw CuPy stream)."""


#: Options always passed to NVRTC unless the caller sets the same flag.
DEFAULT_OPTIONS = ("-std=c++17",)


def compile_options(options: Sequence[str]) -> tuple[str, ...]:
    """``options`` plus :data:`DEFAULT_OPTIONS` for flags the caller did not set."""
    if isinstance(options, str):
        raise TypeError(f"options must be a sequence of strings, not the string {options!r}")
    chosen = tuple(options)
    for option in chosen:
        if not isinstance(option, str):
            raise TypeError(f"compiler option {option!r} is not a string")
    extra = []
    for default in DEFAULT_OPTIONS:
        flag = default.split("=", 1)[0].lstrip("-")
        if not any(option.lstrip("-").startswith(flag) for option in chosen):
            extra.append(default)
    return (*extra, *chosen)


def kernel_argument(value: Any) -> Any:
    """Convert one launch argument to what ``cupy.RawKernel`` accepts.

    ``UnifiedBuffer`` -> its device array (synchronized first); CuPy arrays, NumPy
    scalars and anything with ``__cuda_array_interface__`` pass through; Python ``int``
    and ``float`` pass through too (CuPy sends them as 64-bit ``long long``/``double``:
    use ``numpy.int32(...)`` etc. to match an ``int``/``float`` parameter). A NumPy array
    is refused: a kernel cannot read pageable host memory.
    """
    if isinstance(value, UnifiedBuffer):
        return value.device
    if isinstance(value, np.ndarray):
        if value.ndim == 0:
            return value[()]
        raise TypeError(
            f"a NumPy array of shape {value.shape} cannot be passed to a CUDA kernel: it lives "
            "in host memory. Pass a CuPy array or a UnifiedBuffer (its .device is used)"
        )
    return value


class CudaKernel:
    """A compiled CUDA kernel bound to one device.

    Thread-safe to launch from several threads (CuPy serializes the launch itself).
    """

    def __init__(
        self,
        backend: KernelDevice,
        raw: Any,
        name: str,
        source: str,
        options: tuple[str, ...],
    ) -> None:
        self.backend = backend
        #: The ``cupy.RawKernel``.
        self.raw = raw
        self.name = name
        self.source = source
        self.options = options

    @property
    def max_threads_per_block(self) -> int:
        """The most threads per block this kernel can launch with (registers permitting)."""
        with self.backend.device_context():
            return int(self.raw.max_threads_per_block)

    @property
    def thread_limit(self) -> int:
        """Threads per block this kernel can use on its device (kernel and device limits)."""
        limit = self.max_threads_per_block
        device_limit = self.backend.properties.max_threads_per_block
        return min(limit, device_limit) if device_limit else limit

    def config(self, size: Any, block: Dims | None = None) -> LaunchConfig:
        """The launch configuration covering ``size`` elements on this kernel's device
        (:func:`pdc_core.launch_config` with :attr:`thread_limit`)."""
        return launch_config(size, block, max_threads_per_block=self.thread_limit)

    def launch(
        self,
        grid: Dims,
        block: Dims,
        args: Sequence[Any],
        *,
        stream: Stream | None = None,
        shared_mem: int = 0,
    ) -> None:
        """Queue one launch on ``stream`` (CuPy's current stream when ``None``).

        Returns at once, like any CuPy launch: the kernel runs asynchronously, ordered
        after earlier work on that stream (``CudaBackend.launch_kernel`` without a
        stream is the form that waits). An empty grid launches nothing. Raises
        ``ValueError`` for a block over the kernel's or CUDA's limits.
        """
        grid3, block3 = explicit_config(grid, block, max_threads_per_block=self.thread_limit)
        if 0 in grid3:
            return
        converted = tuple(kernel_argument(arg) for arg in args)
        with self.backend.device_context(), self.backend.stream_context(stream):
            self.raw(grid3, block3, converted, shared_mem=shared_mem)

    def __call__(
        self,
        size: Any,
        *args: Any,
        block: Dims | None = None,
        stream: Stream | None = None,
        shared_mem: int = 0,
    ) -> LaunchConfig:
        """Launch over ``size`` elements with an automatic (or the given) block size.

        Returns the configuration used.
        """
        config = self.config(size, block)
        if not config.empty:
            self.launch(config.grid, config.block, args, stream=stream, shared_mem=shared_mem)
        return config

    def __repr__(self) -> str:
        return f"<CudaKernel {self.name!r} on {self.backend.qualified_name}>"


def compile_raw_module(source: str, options: tuple[str, ...], name: str) -> Any:
    """Compile ``source`` with ``cupy.RawModule`` and return the ``RawKernel`` ``name``.

    Call with the target device current. Raises :class:`CudaCompileError` with NVRTC's
    log on a compile error, and ``ValueError`` when the source has no such kernel.
    """
    import cupy

    module = cupy.RawModule(code=source, options=options)
    try:
        module.compile()
    except cupy.cuda.compiler.CompileException as exc:
        raise CudaCompileError(name, exc.get_message(), source, options) from exc
    try:
        return module.get_function(name)
    except cupy.cuda.driver.CUDADriverError as exc:
        raise ValueError(
            f"the source compiled but defines no kernel named {name!r} ({exc}); declare it "
            f'as extern "C" __global__ void {name}(...) so its name is not mangled'
        ) from None


K = TypeVar("K", bound=CudaKernel)


class KernelCache:
    """The kernels compiled for one device, by source, name and full options.

    A source is compiled once per options: ``refuse`` (the device's check before a
    module load, which raises where a load would wait for a resident kernel) runs
    before each compile, never for a kernel already cached. Thread-safe; two threads
    compiling the same source at once both compile, and both get the first kernel kept.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kernels: dict[tuple[str, str, tuple[str, ...]], CudaKernel] = {}

    def compile(
        self,
        source: str,
        name: str,
        options: Sequence[str],
        refuse: Callable[[str], None],
        load: Callable[[tuple[str, ...]], K],
    ) -> K:
        """The kernel ``name`` of ``source``: cached, or ``load(full_options)``'s."""
        if not isinstance(source, str) or not source.strip():
            raise ValueError("kernel source must be a non-empty string of CUDA C")
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"kernel name must be a C identifier, not {name!r}")
        full_options = compile_options(options)
        key = (source, name, full_options)
        with self._lock:
            cached = self._kernels.get(key)
        if cached is not None:
            # One device's loader makes one kind of kernel, so a cached one is a K.
            return cast(K, cached)
        refuse(name)
        kernel = load(full_options)
        with self._lock:
            return cast(K, self._kernels.setdefault(key, kernel))


def launch_and_wait(
    device: KernelDevice,
    kernel: CudaKernel,
    grid: Dims,
    block: Dims,
    args: tuple[Any, ...],
    *,
    stream: Stream | None,
    shared_mem: int,
) -> None:
    """Launch ``kernel`` of ``device`` (``TypeError`` for another device's); without a
    ``stream``, wait for CuPy's current stream (only) to finish it."""
    if not isinstance(kernel, CudaKernel) or kernel.backend is not device:
        raise TypeError(f"{kernel!r} was not compiled by {device!r}")
    kernel.launch(grid, block, args, stream=stream, shared_mem=shared_mem)
    if stream is None:
        import cupy

        with device.device_context():
            synchronize_stream(cupy.cuda.get_current_stream())
