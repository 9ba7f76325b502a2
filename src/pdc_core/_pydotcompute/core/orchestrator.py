"""Body of PyDotCompute's :mod:`pdc_core.core.orchestrator`; see its docstring."""

from __future__ import annotations

import inspect
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import ExitStack, asynccontextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, cast

import anyio.lowlevel

from pdc_core import Kernel, LaunchConfig, MemoryPool, get_memory_pool
from pdc_core.backend import Stream, dims

from .accelerator import Accelerator, get_accelerator

__all__ = ["ComputeOrchestrator", "KernelExecution", "KernelLaunchConfig"]


@dataclass
class KernelLaunchConfig:
    """A launch's grid and block (ints or tuples of 1 to 3 ints, checked by pdc's rules
    and kept as tuples), dynamic shared memory in bytes, and a stream (``None``: wait
    for the launch to complete)."""

    grid_size: tuple[int, ...] = (1,)
    block_size: tuple[int, ...] = (256,)
    shared_memory_bytes: int = 0
    stream: Stream | None = None

    def __post_init__(self) -> None:
        self.grid_size = dims(self.grid_size, "grid_size")
        self.block_size = dims(self.block_size, "block_size")

    @property
    def launch_config(self) -> LaunchConfig:
        """pdc's :class:`~pdc_core.LaunchConfig` of the grid and block."""
        return LaunchConfig(self.grid_size, self.block_size)


@dataclass
class KernelExecution:
    """One launch: the kernel's name, its configuration, ``time.perf_counter()`` at its
    start and end, and whether it succeeded (else the ``error`` it raised)."""

    # Spelled with its module: the reference reads the annotation where the class is
    # published (pdc_core.core.orchestrator), which imports no UUID.
    execution_id: uuid.UUID = field(default_factory=uuid.uuid4)
    kernel_name: str = ""
    config: KernelLaunchConfig = field(default_factory=KernelLaunchConfig)
    start_time: float = 0.0
    end_time: float = 0.0
    success: bool = False
    error: Exception | None = None

    @property
    def duration_ms(self) -> float:
        """``end_time - start_time`` in milliseconds."""
        return (self.end_time - self.start_time) * 1e3


class ComputeOrchestrator:
    """Kernels by name, their launches recorded (see the module documentation).

    ``async with ComputeOrchestrator() as orchestrator:`` or ``await initialize()`` ...
    ``await shutdown()``; both calls may be repeated.
    """

    def __init__(self) -> None:
        self._accelerator: Accelerator | None = None
        self._memory_pool: MemoryPool | None = None
        self._registered_kernels: dict[str, Callable[..., Any]] = {}
        self._execution_history: list[KernelExecution] = []
        self._streams: list[Stream] = []
        self._active = False

    async def __aenter__(self) -> ComputeOrchestrator:
        await self.initialize()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.shutdown()

    async def initialize(self) -> None:
        """Take the accelerator and pdc's memory pool; nothing more when active.
        Cancelled before it takes them, it leaves the orchestrator as it was."""
        await anyio.lowlevel.checkpoint()
        if not self._active:
            self._accelerator = get_accelerator()
            self._memory_pool = get_memory_pool()
            self._active = True

    async def shutdown(self) -> None:
        """Synchronize and close the streams this orchestrator made; then inactive.
        The streams are closed even when this is cancelled."""
        try:
            await anyio.lowlevel.checkpoint()
        finally:
            streams, self._streams = self._streams, []
            self._active = False
            with ExitStack() as closing:  # every stream closed, even if one sync raises
                for stream in streams:
                    closing.callback(stream.close)
                for stream in streams:
                    stream.synchronize()

    @property
    def is_active(self) -> bool:
        """Between :meth:`initialize` and :meth:`shutdown`."""
        return self._active

    @property
    def accelerator(self) -> Accelerator | None:
        """The accelerator (``None`` before :meth:`initialize`)."""
        return self._accelerator

    @property
    def memory_pool(self) -> MemoryPool | None:
        """pdc's process-wide memory pool (``None`` before :meth:`initialize`)."""
        return self._memory_pool

    def register_kernel(self, name: str, kernel_func: Callable[..., Any]) -> None:
        """Launch ``kernel_func`` by ``name`` from now on (replacing one of that name)."""
        self._registered_kernels[name] = kernel_func

    def get_kernel(self, name: str) -> Callable[..., Any] | None:
        """The kernel registered as ``name``, or ``None``."""
        return self._registered_kernels.get(name)

    async def launch_kernel(
        self,
        kernel: Callable[..., Any] | str,
        config: KernelLaunchConfig,
        *args: Any,
        **kwargs: Any,
    ) -> KernelExecution:
        """Launch ``kernel`` (a function or a registered name) with ``args``; its
        :class:`KernelExecution`, also kept in the history. A name not registered is a
        ``ValueError``; an error of the kernel is recorded, then raised. Cancelled,
        it records the launch as failed, with no error; a pdc kernel already launched
        completes first (:meth:`pdc_core.Kernel.launch_async`: no launch outlives the
        call)."""
        if isinstance(kernel, str):
            function = self._registered_kernels.get(kernel)
            if function is None:
                known = ", ".join(sorted(self._registered_kernels)) or "none"
                raise ValueError(f"Kernel {kernel!r} not registered (registered: {known})")
            name = kernel
        else:
            function = kernel
            name = kernel.name if isinstance(kernel, Kernel) else getattr(kernel, "__name__", "")
        execution = KernelExecution(kernel_name=name, config=config)
        self._execution_history.append(execution)
        execution.start_time = time.perf_counter()
        try:
            await self._run(function, config, args, kwargs)
        except Exception as error:
            execution.error = error
            raise
        finally:
            execution.end_time = time.perf_counter()
        execution.success = True
        return execution

    @staticmethod
    async def _run(
        function: Callable[..., Any],
        config: KernelLaunchConfig,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        if isinstance(function, Kernel):
            if kwargs:
                raise TypeError(
                    f"kernel {function.name!r} takes positional arguments only, "
                    f"not {', '.join(kwargs)}"
                )
            await function.launch_async(
                *args,
                grid=config.grid_size,
                block=config.block_size,
                stream=config.stream,
                shared_mem=config.shared_memory_bytes,
            )
            return
        await anyio.lowlevel.checkpoint()
        if hasattr(function, "forall"):  # a numba.cuda kernel: numba's launch form
            cast(Any, function)[config.grid_size, config.block_size](*args, **kwargs)
            return
        result = function(*args, **kwargs)
        if inspect.isawaitable(result):
            await result

    def create_stream(self) -> Stream | None:
        """A new stream on the current device's backend, closed by :meth:`shutdown`
        (``None`` before :meth:`initialize`)."""
        if self._accelerator is None:
            return None
        stream = self._accelerator._backend().create_stream()
        self._streams.append(stream)
        return stream

    def synchronize(self) -> None:
        """Wait for the current device's queued work."""
        if self._accelerator is not None:
            self._accelerator.synchronize()

    def get_execution_history(
        self, limit: int | None = None, kernel_name: str | None = None
    ) -> list[KernelExecution]:
        """The recorded launches, oldest first: of ``kernel_name`` only when given, the
        last ``limit`` when given."""
        history = [e for e in self._execution_history if kernel_name in (None, e.kernel_name)]
        return history[-limit:] if limit else history

    def clear_execution_history(self) -> None:
        """Forget the recorded launches."""
        self._execution_history.clear()

    @asynccontextmanager
    async def stream_context(self) -> AsyncIterator[Stream | None]:
        """A new stream (see :meth:`create_stream`) for the block, synchronized when it
        ends. Entering is a checkpoint: a caller already cancelled makes no stream."""
        await anyio.lowlevel.checkpoint()  # on every path, as trio's API
        stream = self.create_stream()
        try:
            yield stream
        finally:
            if stream is not None:
                stream.synchronize()

    def __repr__(self) -> str:
        return (
            f"ComputeOrchestrator(active={self._active}, "
            f"kernels={len(self._registered_kernels)}, "
            f"executions={len(self._execution_history)})"
        )
