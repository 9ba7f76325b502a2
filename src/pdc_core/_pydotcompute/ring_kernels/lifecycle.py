"""Body of PyDotCompute\'s :mod:`pdc_core.ring_kernels.lifecycle`; see its docstring."""

from __future__ import annotations

import abc
import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.lowlevel

from pdc_core import Backpressure, KernelStateError
from pdc_core.lowlevel import current_kit

from .._seed import KernelState, RingKernelContext, RingKernelDefinition
from .._seed import RingKernel as _PdcRingKernel
from .._seed._ring_kernel import KernelFunction
from .._seed._runtime import RingKernelRuntime

#: PyDotCompute's name for :class:`~pdc_core.RingKernelContext`.
KernelContext = RingKernelContext

__all__ = ["KernelContext", "KernelState", "RingKernel", "RingKernelConfig", "managed_kernel"]


@dataclass(frozen=True)
class RingKernelConfig:
    """A ring kernel's configuration under PyDotCompute's field names.

    Checked when made, by the rules of :class:`~pdc_core.RingKernelDefinition`
    (``ValueError`` or ``TypeError`` naming the value). ``use_fast_queue`` is accepted
    and ignored: every pdc kernel queue is a :class:`~pdc_core.Mailbox`.
    """

    kernel_id: str
    grid_size: int = 1
    block_size: int = 256
    input_queue_size: int = 4096
    output_queue_size: int = 4096
    backpressure_strategy: str = "block"
    use_fast_queue: bool = True

    def __post_init__(self) -> None:
        self.definition(_unused_kernel)  # pdc's checks, in one place

    def definition(self, func: KernelFunction) -> RingKernelDefinition:
        """pdc's definition of ``func`` with this configuration (for ``runtime.launch``)."""
        return RingKernelDefinition(
            func,
            kernel_id=self.kernel_id,
            input_queue_size=self.input_queue_size,
            output_queue_size=self.output_queue_size,
            backpressure=Backpressure.coerce(self.backpressure_strategy),
            grid_size=self.grid_size,
            block_size=self.block_size,
        )


async def _unused_kernel(ctx: RingKernelContext) -> None:
    """The function a configuration is checked with (never run)."""


@asynccontextmanager
async def managed_kernel(
    kernel_id: str, kernel_func: KernelFunction | RingKernelDefinition, **config: Any
) -> AsyncIterator[_PdcRingKernel]:
    """``async with managed_kernel(id, func) as kernel:``: ``func`` launched and
    activated in a runtime of its own for the block, terminated after it.

    ``config`` is as for :meth:`RingKernelRuntime.launch <pdc_core.RingKernelRuntime.launch>`.
    New code launches kernels in one ``async with RingKernelRuntime()``.
    """
    async with (
        RingKernelRuntime() as runtime,
        runtime.kernel_scope(kernel_id, kernel_func, **config) as kernel,
    ):
        assert isinstance(kernel, _PdcRingKernel)  # a function, not a PersistentKernel
        yield kernel


class RingKernel(abc.ABC):  # noqa: B024 - an ABC for register(): runtime kernels are ones
    """PyDotCompute's free-standing ring kernel: ``RingKernel(kernel_id, func)``.

    ``await kernel.launch()`` starts it (state LAUNCHED) in a
    :class:`~pdc_core.RingKernelRuntime` of its own, run by a task of the event loop's
    own; then ``activate``/``deactivate``/``reactivate``/``send``/``receive`` are the
    launched :class:`pdc_core.RingKernel`'s, and ``terminate()`` stops the kernel and
    its runtime (re-raising a crash of the kernel as
    :class:`~pdc_core.ActorCrashed`). Before ``launch()`` the state is
    ``KernelState.CREATED`` and each of them raises
    :class:`~pdc_core.KernelStateError`, as does a second ``launch()``. ``config``
    (a :class:`RingKernelConfig`, or keywords as for ``runtime.launch``) configures it.
    A kernel never terminated is cancelled when the event loop's run ends.
    """

    def __init__(
        self,
        kernel_id: str,
        kernel_func: KernelFunction,
        config: RingKernelConfig | None = None,
        **options: Any,
    ) -> None:
        self._kernel_id = kernel_id
        self._target: KernelFunction | RingKernelDefinition = (
            kernel_func if config is None else config.definition(kernel_func)
        )
        self._options = options
        self._kernel: _PdcRingKernel | None = None
        self._launched: anyio.Event | None = None
        self._stop: anyio.Event | None = None  # the events are made in launch(), in the loop
        self._done: anyio.Event | None = None
        self._error: BaseException | None = None
        self._abandoned = False  # launch() was cancelled: the kernel is stopped, for good

    @property
    def kernel_id(self) -> str:
        """The kernel's id."""
        return self._kernel_id

    @property
    def state(self) -> KernelState:
        """What :meth:`launch` will do: CREATED before it (it launches); LAUNCHED while
        it starts the kernel; TERMINATED once a launch was cancelled and FAILED once
        one failed (it refuses both); else the launched kernel's ``kernel_state``."""
        if self._abandoned:
            return KernelState.TERMINATED
        if self._kernel is not None:
            return self._kernel.kernel_state
        if self._launched is None:
            return KernelState.CREATED
        return KernelState.FAILED if self._error is not None else KernelState.LAUNCHED

    def _launched_kernel(self, operation: str) -> _PdcRingKernel:
        if self._kernel is None or self._abandoned:
            state = self.state.name
            if state == "LAUNCHED":
                state = "LAUNCHED (still starting)"
            raise KernelStateError(self._kernel_id, state, operation, allowed="launched")
        return self._kernel

    async def launch(self) -> None:
        """Start the kernel, delivery paused (state LAUNCHED); once only.

        Returns once it runs. A launch that fails (a bad configuration) raises here;
        cancelled while it starts, the kernel is stopped again.
        """
        await anyio.lowlevel.checkpoint()  # on every path
        if self._launched is not None:
            raise KernelStateError(self._kernel_id, self.state.name, "launch", allowed="CREATED")
        launched = self._launched = anyio.Event()
        stop = self._stop = anyio.Event()
        done = self._done = anyio.Event()
        host = functools.partial(self._host, launched, stop, done)
        current_kit().spawn_system_task(host, name=f"pdc-ring-kernel-{self._kernel_id}")
        try:
            await launched.wait()
        except BaseException:
            # The caller gave up: the kernel does not outlive the launch, and the state
            # says so now, not once the runtime has wound down.
            self._abandoned = True
            stop.set()
            raise
        if self._kernel is None and self._error is not None:
            raise self._error

    async def _host(self, launched: anyio.Event, stop: anyio.Event, done: anyio.Event) -> None:
        try:
            async with RingKernelRuntime() as runtime:
                kernel = await runtime.launch(self._kernel_id, self._target, **self._options)
                assert isinstance(kernel, _PdcRingKernel)  # a function: not persistent
                self._kernel = kernel
                launched.set()
                await stop.wait()
        except anyio.get_cancelled_exc_class():
            raise  # the run is ending: a system task may end so
        except BaseException as exc:  # kept for launch()/terminate(): a system task must not raise
            self._error = exc
        finally:
            launched.set()
            done.set()

    async def activate(self) -> None:
        """Start delivering messages (LAUNCHED -> ACTIVE); cancellation as
        :meth:`pdc_core.RingKernel.activate`."""
        await anyio.lowlevel.checkpoint()
        await self._launched_kernel("activate").activate()

    async def deactivate(self) -> None:
        """Pause delivery (ACTIVE -> DEACTIVATED); cancellation as
        :meth:`pdc_core.RingKernel.deactivate`."""
        await anyio.lowlevel.checkpoint()
        await self._launched_kernel("deactivate").deactivate()

    async def reactivate(self) -> None:
        """Resume delivery (DEACTIVATED -> ACTIVE); cancellation as
        :meth:`pdc_core.RingKernel.reactivate`."""
        await anyio.lowlevel.checkpoint()
        await self._launched_kernel("reactivate").reactivate()

    async def send(self, message: Any, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """Put ``message`` on the kernel's input queue (see ``runtime.send``); a cancelled
        send puts nothing there."""
        await anyio.lowlevel.checkpoint()
        await self._launched_kernel("send to").send(message, timeout=timeout)

    async def receive(self, timeout: float | None = None) -> Any:  # noqa: ASYNC109
        """The kernel's next output (see ``runtime.receive``); a cancelled receive takes
        nothing."""
        await anyio.lowlevel.checkpoint()
        return await self._launched_kernel("receive from").receive(timeout=timeout)

    async def terminate(self, timeout: float = 5.0) -> None:  # noqa: ASYNC109
        """Stop the kernel (draining within ``timeout`` s) and its runtime; wait for both.

        Cancelled, the stop goes on in the background and is not waited for. After a
        cancelled launch (state TERMINATED) it waits for that stop and returns, as a
        terminated kernel's ``terminate`` does.
        """
        await anyio.lowlevel.checkpoint()
        if self._abandoned and self._done is not None:
            await self._done.wait()
            return
        kernel = self._launched_kernel("terminate")
        stop, done = self._stop, self._done
        assert stop is not None
        assert done is not None
        try:
            await kernel.terminate(timeout=timeout)
        finally:
            stop.set()
        await done.wait()
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def __repr__(self) -> str:
        # Says which API: pdc_core.RingKernel is what runtime.launch returns.
        return f"<PyDotCompute's RingKernel {self._kernel_id!r} state={self.state.name}>"


RingKernel.register(_PdcRingKernel)
