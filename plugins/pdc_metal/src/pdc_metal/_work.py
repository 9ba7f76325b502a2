"""The metal backend's kernel services: MLX code and kernels run on the backend's device.

:class:`MetalWork` is what :class:`pdc_metal.MetalBackend`'s methods for running work
delegate to (``as_mlx``, ``run``, ``submit``, ``run_async``, ``run_python_kernel``,
``compile_kernel``; the backend's docstrings state the guarantees). It knows no
backend class: what it needs of its backend is :class:`WorkHost`, and its memory is
the backend's :class:`~pdc_metal._memory.MetalMemory`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, Protocol

import anyio
import numpy as np
import numpy.typing as npt

from pdc_core import CapabilityError, UnifiedBuffer
from pdc_core.backend import Stream

from ._kernels import KernelRunner, MetalKernel, parse_kernel_options
from ._memory import MetalMemory
from ._mlx import MlxDevice
from ._streams import MetalStream, check_stream, evaluate

__all__ = ["MetalWork", "WorkHost"]


class WorkHost(MlxDevice, KernelRunner, Protocol):
    """What the kernel services need of their backend (``MetalBackend`` is one): MLX and
    its device, whether that device is a Metal GPU, the default stream, and what a
    compiled kernel needs (:class:`~pdc_metal._kernels.KernelRunner`)."""

    #: Whether MLX runs on a Metal GPU here (else on its CPU device).
    is_metal: bool

    @property
    def default_stream(self) -> MetalStream:
        """The stream work runs on when given none."""


class MetalWork:
    """Runs MLX code and kernels for one metal backend (see the module)."""

    __slots__ = ("_backend", "_memory", "_mlx_device", "_mx")

    def __init__(self, backend: WorkHost, memory: MetalMemory) -> None:
        self._backend = backend
        self._memory = memory
        self._mx = backend.mx
        self._mlx_device = backend.mlx_device

    def as_mlx(self, value: Any) -> Any:
        """``value`` as an MLX array for a kernel body: zero-copy where MLX allows."""
        mx = self._mx
        if isinstance(value, UnifiedBuffer):
            backend: object = self._backend  # compared by identity: is it this backend's?
            if value.backend is backend:
                return value.device
            return self._memory.to_device(value.host_readonly())
        if isinstance(value, np.ndarray):
            return self._memory.view_or_copy(value)
        if isinstance(value, mx.array):
            mx.eval(value)
        return value

    def run(
        self,
        fn: Callable[..., Any],
        *args: Any,
        out: Any = None,
        **kwargs: Any,
    ) -> Any:
        """Run ``fn`` on the device, now; its evaluated result (also into ``out``)."""
        mx = self._mx
        converted = [self.as_mlx(arg) for arg in args]
        with mx.stream(self._mlx_device):
            result = evaluate(fn(*converted, **kwargs))
        if out is not None:
            self.write_results(result, out)
        return result

    def submit(
        self,
        fn: Callable[..., Any],
        *args: Any,
        out: Any = None,
        stream: MetalStream | None = None,
        **kwargs: Any,
    ) -> Future[Any]:
        """Queue ``fn`` on ``stream`` (default: the backend's); returns a future."""
        target = check_stream(stream) or self._backend.default_stream
        converted = [self.as_mlx(arg) for arg in args]

        def work() -> Any:
            result = evaluate(fn(*converted, **kwargs))
            if out is not None:
                self.write_results(result, out)
            return result

        return target.submit(work)

    async def run_async(
        self,
        fn: Callable[..., Any],
        *args: Any,
        out: Any = None,
        stream: MetalStream | None = None,
        **kwargs: Any,
    ) -> Any:
        """``submit``, then wait for the result without blocking the event loop.

        Cancelling the wait does not un-queue the work (device work cannot be
        recalled); it completes on its stream and its result is dropped.
        """
        future = self.submit(fn, *args, out=out, stream=stream, **kwargs)
        delay = 0.0
        while not future.done():
            await anyio.sleep(delay)
            delay = min(0.001, delay * 2 or 0.00005)
        return future.result()

    def write_results(self, result: Any, out: Any) -> None:
        """Write the MLX array(s) ``result`` into ``out`` (matching one for one)."""
        mx = self._mx
        if isinstance(result, mx.array):
            results: Sequence[Any] = (result,)
            outs: Sequence[Any] = (out,)
        else:
            results = tuple(result)
            outs = tuple(out) if isinstance(out, list | tuple) else (out,)
        if len(results) != len(outs):
            raise ValueError(f"{len(results)} result(s) but {len(outs)} output(s) given in out=")
        for value, target in zip(results, outs, strict=True):
            if not isinstance(value, mx.array):
                raise TypeError(f"the kernel returned {type(value).__name__}, not an MLX array")
            source = np.asarray(value)
            np.copyto(self._memory.writable_host_view(target, source), source)

    def run_python_kernel(
        self,
        body: Callable[..., Any],
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        args: tuple[Any, ...],
        *,
        shared_mem: int = 0,
        stream: Stream | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        """Run a ``@kernel`` body written with MLX operations, once, over whole arrays."""
        mx = self._mx
        metal_stream = check_stream(stream)
        converted: list[Any] = []
        # (MLX argument, a NumPy view of the memory it must end up in, kept alive)
        outputs: list[tuple[Any, npt.NDArray[Any], Any]] = []
        for arg in args:
            if isinstance(arg, np.ndarray):
                value = self._memory.view_or_copy(arg)
                converted.append(value)
                if arg.flags.writeable:
                    outputs.append((value, arg, None))
            elif isinstance(arg, mx.array):
                mx.eval(arg)
                alias = mx.view(arg, arg.dtype)  # shares the buffer; never rebound
                mx.eval(alias)
                converted.append(arg)
                outputs.append((arg, np.asarray(alias), alias))
            else:
                converted.append(arg)

        def launch() -> None:
            result = body(*converted)
            if result is not None:
                raise TypeError(
                    f"the kernel body returned {type(result).__name__}; a kernel returns "
                    "nothing: write results into its array arguments (out[...] = ...)"
                )
            mx.eval([value for value, _, _ in outputs])
            for value, target, _ in outputs:
                source = np.asarray(value)
                if source.ctypes.data != target.ctypes.data:
                    np.copyto(target, source)

        if metal_stream is None:
            with mx.stream(self._mlx_device):
                launch()
        else:
            metal_stream.enqueue(launch)

    def compile_kernel(self, source: str, name: str, options: tuple[str, ...] = ()) -> MetalKernel:
        """Compile a Metal shader body with ``mx.fast.metal_kernel``."""
        if not self._backend.is_metal:
            raise CapabilityError(
                "the metal backend cannot compile Metal shader source here: MLX has no "
                "Metal device on this machine (it runs on MLX's CPU device). Write the "
                "kernel as MLX operations and run it with backend.run(fn, ...)"
            )
        if not isinstance(source, str) or not source.strip():
            raise ValueError("the Metal kernel source must be a non-empty string")
        settings = parse_kernel_options(options)
        compiled = self._mx.fast.metal_kernel(name=name, source=source, **settings)
        return MetalKernel(self._backend, name, compiled, settings)
