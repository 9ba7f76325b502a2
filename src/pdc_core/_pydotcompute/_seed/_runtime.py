"""The seed API's runtime: ``RingKernelRuntime`` launches ring kernels and routes
messages to them by id (see :mod:`._ring_kernel` for the lifecycle)."""

# Timeouts are parameters here, as in the seed API (see _mailbox for why not scopes).
# ruff: noqa: ASYNC109

from __future__ import annotations

from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol, Self, TypeVar, cast, overload

import anyio

from ..._actors import (
    ActorNursery,
    Backpressure,
    RestartPolicy,
    open_nursery,
)
from ..._exceptions import (
    KernelAlreadyExistsError,
    KernelNotFoundError,
    LifecycleError,
)
from ...backend import PersistentKernelSpec
from ...lowlevel import (
    ActorRunner,
    check_duration,
    check_timeout,
    current_kit,
    full_checkpoint,
    seconds_or_inf,
)
from ._lifecycle import FINAL_STATES, KernelState
from ._persistent_runtime import PersistentRingKernel, launch_persistent
from ._ring_kernel import (
    KernelFunction,
    RingKernel,
    RingKernelDefinition,
    check_queue_size,
    get_ring_kernel,
)
from ._telemetry import Telemetry

if TYPE_CHECKING:
    from ...backend import Backend

__all__ = ["RingKernelRuntime", "TelemetryT"]

#: What ``get_telemetry`` returns: ``Telemetry``, or ``None`` with telemetry disabled.
TelemetryT = TypeVar("TelemetryT", bound="Telemetry | None")


class _KernelConfig(Protocol):
    """What ``launch(config=)`` takes: PyDotCompute's ``RingKernelConfig``
    (:mod:`pdc_core.ring_kernels.lifecycle`, a layer above this module), which makes
    pdc's definition of a kernel function."""

    def definition(self, func: KernelFunction) -> RingKernelDefinition: ...


class _Host:
    """A started runtime's host task: who started it, and the events between them."""

    def __init__(self, starter: object, starter_name: str | None) -> None:
        # The task object itself, held: an id (anyio's TaskInfo) is reused once the
        # task ends, and another task could then pass for it.
        self.starter = starter
        self.starter_name = starter_name
        self.ready = anyio.Event()  # the nursery is open (or failed to open)
        self.stop = anyio.Event()  # shutdown() asks the host to close it
        self.done = anyio.Event()  # the host has ended
        self.timeout = 5.0  # shutdown()'s drain time, set before ``stop``
        self.error: BaseException | None = None


class RingKernelRuntime(Generic[TelemetryT]):
    """Launches ring kernels and routes messages to them (PyDotCompute's runtime).

    Use it as an async context manager; kernels live no longer than the block. On a
    normal exit every live kernel is terminated (draining its queue, at most
    ``shutdown_timeout`` seconds in all); if the block raises, they are cancelled.
    ``use_uvloop`` and ``use_eager_tasks`` are accepted for compatibility and ignored:
    the event loop is the caller's choice. PyDotCompute's ``await runtime.start()`` and
    ``await runtime.shutdown()`` work too (see :meth:`start`).
    """

    @overload
    def __init__(
        self: RingKernelRuntime[Telemetry],
        *,
        enable_telemetry: Literal[True] = True,
        shutdown_timeout: float = 5.0,
        use_uvloop: bool = False,
        use_eager_tasks: bool = False,
    ) -> None: ...

    @overload
    def __init__(
        self: RingKernelRuntime[None],
        *,
        enable_telemetry: Literal[False],
        shutdown_timeout: float = 5.0,
        use_uvloop: bool = False,
        use_eager_tasks: bool = False,
    ) -> None: ...

    @overload
    def __init__(
        self: RingKernelRuntime[Telemetry | None],
        *,
        enable_telemetry: bool,
        shutdown_timeout: float = 5.0,
        use_uvloop: bool = False,
        use_eager_tasks: bool = False,
    ) -> None: ...

    def __init__(
        self,
        *,
        enable_telemetry: bool = True,
        shutdown_timeout: float = 5.0,
        use_uvloop: bool = False,
        use_eager_tasks: bool = False,
    ) -> None:
        self._enable_telemetry = enable_telemetry
        check_duration(shutdown_timeout, "shutdown_timeout")
        self._shutdown_timeout = shutdown_timeout
        self._kernels: dict[str, RingKernel | PersistentRingKernel] = {}
        self._nursery: ActorNursery | None = None
        self._active = False
        self._host: _Host | None = None  # by start(): the task that runs the nursery

    async def __aenter__(self) -> Self:
        await full_checkpoint(current_kit())  # a checkpoint on every path
        if self._nursery is not None:
            raise LifecycleError("a RingKernelRuntime can be entered only once")
        self._nursery = open_nursery()
        await self._nursery.__aenter__()
        self._active = True
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        return await self._close(exc_type, exc, tb, self._shutdown_timeout)

    async def _close(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        timeout: float,
    ) -> bool:
        """Leave the runtime: terminate the kernels (``timeout`` in all) unless ``exc``
        ends it, then close the nursery, which raises a kernel's crash."""
        assert self._nursery is not None
        if exc is None:
            try:
                await self._terminate_all(timeout)
            except BaseException as error:
                self._active = False
                if not await self._nursery.__aexit__(type(error), error, error.__traceback__):
                    raise
                return False
        self._active = False
        return await self._nursery.__aexit__(exc_type, exc, tb)

    async def start(self) -> None:
        """Start the runtime without ``async with`` (PyDotCompute's way); ``await
        shutdown()`` ends it.

        The runtime's nursery runs in a task of the event loop's own (as a free-standing
        :class:`~pdc_core.ring_kernels.lifecycle.RingKernel`'s does), so a runtime never
        shut down is cancelled, with its kernels, when the event loop's run ends, under
        asyncio and trio alike. :meth:`shutdown` must be awaited by the task that called
        ``start()`` (``try: ... finally: await runtime.shutdown()``); from another task
        it raises :class:`~pdc_core.LifecycleError` naming both. A kernel that crashes
        meanwhile stops the runtime (``is_active`` turns False) and ``shutdown`` raises
        :class:`~pdc_core.ActorCrashed`. Prefer ``async with RingKernelRuntime() as
        runtime:``, which cannot forget the ``shutdown``. Raises
        :class:`~pdc_core.LifecycleError` if the runtime was started before. A caller
        already cancelled on entry starts nothing; cancelled while it starts, the
        runtime is stopped again.
        """
        kit = current_kit()
        await full_checkpoint(kit)  # a checkpoint on every path
        if self._nursery is not None or self._host is not None:
            raise LifecycleError("a RingKernelRuntime can be entered only once")
        host = self._host = _Host(kit.current_task(), anyio.get_current_task().name)
        kit.spawn_system_task(lambda: self._run_host(host), name="pdc-ring-kernel-runtime")
        try:
            await host.ready.wait()
        except BaseException:
            host.stop.set()  # the caller gave up: the runtime does not outlive start()
            raise
        if not self._active and host.error is not None:
            raise host.error

    async def _run_host(self, host: _Host) -> None:
        """The task of the event loop's own that runs a started runtime's nursery until
        :meth:`shutdown` (or a crash, or the run's end). It keeps errors for
        ``shutdown`` (a system task must not raise) and ends when cancelled."""
        try:
            await self.__aenter__()
            try:
                host.ready.set()
                await host.stop.wait()
            except BaseException as exc:  # a kernel's crash cancelled it, or the run ends
                if not await self._close(type(exc), exc, exc.__traceback__, host.timeout):
                    raise
                return
            await self._close(None, None, None, host.timeout)
        except anyio.get_cancelled_exc_class():
            raise  # the run is ending: a system task may end so
        except BaseException as exc:  # kept for start()/shutdown()
            host.error = exc
        finally:
            self._active = False
            host.ready.set()
            host.done.set()

    @asynccontextmanager
    async def kernel_scope(
        self,
        kernel_id: str,
        kernel_func: KernelFunction | RingKernelDefinition | None = None,
        **config: Any,
    ) -> AsyncIterator[RingKernel | PersistentRingKernel]:
        """``async with runtime.kernel_scope(id, func) as kernel:``: the kernel launched
        (``config`` as for :meth:`launch`) and activated for the block, terminated after
        it, whichever way the block ends."""
        kernel = await self.launch(kernel_id, kernel_func, **config)
        try:
            await self.activate(kernel_id)
            yield kernel
        finally:
            with anyio.CancelScope(shield=True):  # terminated even when cancelled
                await self.terminate(kernel_id)

    @property
    def is_active(self) -> bool:
        """Whether the runtime is running (inside its ``async with`` block)."""
        return self._active

    @property
    def kernel_ids(self) -> list[str]:
        """Ids of the live kernels: launched and not yet terminated (or failed).

        A terminated kernel leaves this list, as in PyDotCompute, but stays known to
        :meth:`get_kernel`, :meth:`get_kernel_state`, :attr:`kernel_states` and
        :meth:`receive` (for the replies it left) until its id is launched again.
        """
        return [
            kernel_id
            for kernel_id, kernel in self._kernels.items()
            if kernel.kernel_state not in FINAL_STATES
        ]

    @property
    def kernel_states(self) -> dict[str, KernelState]:
        """Each launched kernel's state, by id."""
        return {kernel_id: kernel.kernel_state for kernel_id, kernel in self._kernels.items()}

    def get_kernel(self, kernel_id: str) -> RingKernel | PersistentRingKernel:
        """The kernel launched under ``kernel_id``: a :class:`RingKernel`, or a
        :class:`~pdc_core.PersistentRingKernel` for a persistent kernel.

        Raises :class:`~pdc_core.KernelNotFoundError` listing the known ids.
        """
        try:
            return self._kernels[kernel_id]
        except KeyError:
            raise KernelNotFoundError(kernel_id, list(self._kernels)) from None

    def get_kernel_state(self, kernel_id: str) -> KernelState:
        """The state of the kernel launched under ``kernel_id``."""
        return self.get_kernel(kernel_id).kernel_state

    async def launch(
        self,
        kernel_id: str,
        kernel_func: KernelFunction | RingKernelDefinition | PersistentKernelSpec | None = None,
        *,
        config: Any = None,  # a RingKernelConfig: a layer above, so not named here
        input_type: type | None = None,
        output_type: type | None = None,
        queue_size: int | None = None,
        backpressure: Backpressure | str | None = None,
        restart: RestartPolicy | None = None,
        backend: Backend | str | None = None,
        **options: Any,
    ) -> RingKernel | PersistentRingKernel:
        """Phase 1: start the kernel, with delivery paused (state LAUNCHED).

        Without ``kernel_func``, the kernel registered under ``kernel_id`` by
        ``@ring_kernel`` is used (:class:`~pdc_core.KernelNotFoundError` lists the
        registered ids if there is none). Keyword arguments override the registered
        configuration. ``config`` (PyDotCompute's
        :class:`~pdc_core.ring_kernels.lifecycle.RingKernelConfig`) configures the
        function as PyDotCompute's ``launch(..., config=)`` did (queue sizes,
        backpressure, grid and block; the id is ``kernel_id``), replacing a registered
        configuration; ``queue_size`` and ``backpressure``, given too, override it.
        Launching an id that is still live raises
        :class:`~pdc_core.KernelAlreadyExistsError`; a terminated one is replaced.
        Returns once the kernel task is running.

        A :class:`~pdc_core.PersistentKernel` is launched resident and parked on
        ``backend`` (default: the best available) and driven through its ring; see
        :class:`~pdc_core.PersistentRingKernel`. ``options`` (``stop_timeout``,
        ``launch_timeout``, ``receive_window`` and the backend's own launch options)
        apply to it only; ``input_type``, ``output_type``, ``queue_size`` and
        ``backpressure`` do not (its records and ring capacity are in the kernel).
        Options that do not apply are a :class:`TypeError`; outside ``async with`` it
        raises :class:`~pdc_core.LifecycleError`. A caller already cancelled on entry
        launches nothing; cancelled while the kernel starts, the kernel is not
        registered under ``kernel_id``.
        """
        await full_checkpoint(current_kit())  # a checkpoint on every path
        if not self._active or self._nursery is None:
            raise LifecycleError(
                "the runtime is not running: use `async with RingKernelRuntime() as runtime:`"
            )
        existing = self._kernels.get(kernel_id)
        if existing is not None and existing.kernel_state not in FINAL_STATES:
            raise KernelAlreadyExistsError(
                f"kernel {kernel_id!r} is already launched (state {existing.kernel_state.name}); "
                "terminate it before launching it again"
            )
        kernel: RingKernel | PersistentRingKernel
        runner: ActorRunner
        if isinstance(kernel_func, PersistentKernelSpec):
            queue_options = {
                "config": config,
                "input_type": input_type,
                "output_type": output_type,
                "queue_size": queue_size,
                "backpressure": backpressure,
            }
            given = [name for name, value in queue_options.items() if value is not None]
            if given:
                raise TypeError(
                    f"{', '.join(given)} do not apply to a PersistentKernel: its records "
                    "are its request_dtype and reply_dtype, and its queue is its ring"
                )
            kernel, runner = launch_persistent(
                kernel_id, kernel_func, backend, telemetry=self._enable_telemetry, **options
            )
        else:
            if backend is not None or options:
                given = (["backend"] if backend is not None else []) + sorted(options)
                raise TypeError(
                    f"{', '.join(given)} apply to persistent kernels only, and "
                    f"{kernel_id!r} is a kernel function"
                )
            definition = _launch_definition(
                kernel_id, kernel_func, config, input_type, output_type, queue_size, backpressure
            )
            kernel = RingKernel(definition, current_kit(), telemetry=self._enable_telemetry)
            runner = kernel._runner
        self._kernels[kernel_id] = kernel
        try:
            await self._nursery.start_actor(runner, restart=restart)
        except BaseException:
            if self._kernels.get(kernel_id) is kernel:
                del self._kernels[kernel_id]
            raise
        return kernel

    async def activate(self, kernel_id: str) -> None:
        """Phase 2: LAUNCHED -> ACTIVE, start delivering messages.

        Raises :class:`~pdc_core.KernelNotFoundError` for an unknown id and
        :class:`~pdc_core.KernelStateError` in another state. A caller already
        cancelled on entry changes nothing; a persistent kernel, cancelled while it
        waits for the kernel to leave its pause, has the resume requested.
        """
        await full_checkpoint(current_kit())  # a checkpoint on every path
        await self.get_kernel(kernel_id).activate()

    async def deactivate(self, kernel_id: str) -> None:
        """ACTIVE -> DEACTIVATED: pause delivery (messages keep queueing).

        Errors as for :meth:`activate`. A caller already cancelled on entry changes
        nothing; a persistent kernel, cancelled while it waits for the kernel to
        park, has the pause requested.
        """
        await full_checkpoint(current_kit())  # a checkpoint on every path
        await self.get_kernel(kernel_id).deactivate()

    async def reactivate(self, kernel_id: str) -> None:
        """DEACTIVATED -> ACTIVE: resume delivery.

        Errors and cancellation as for :meth:`activate`.
        """
        await full_checkpoint(current_kit())  # a checkpoint on every path
        await self.get_kernel(kernel_id).reactivate()

    async def terminate(self, kernel_id: str, timeout: float = 5.0) -> None:
        """Drain the kernel's queue for up to ``timeout`` seconds, then stop it.

        Raises :class:`~pdc_core.KernelNotFoundError` for an unknown id. A caller
        already cancelled on entry terminates nothing; cancelled while it waits, the
        kernel stays terminating (it takes no new messages).
        """
        await full_checkpoint(current_kit())  # a checkpoint on every path
        await self.get_kernel(kernel_id).terminate(timeout)

    async def shutdown(self, timeout: float = 5.0) -> None:
        """Terminate every live kernel, draining them for ``timeout`` seconds in all;
        a runtime started by :meth:`start` then stops (``is_active`` turns False).

        A caller already cancelled on entry terminates nothing; cancelled while it
        waits, the kernels stay terminating (they take no new messages). For a runtime
        started by :meth:`start` it is the end of the ``async with`` block, awaited by
        the task that called ``start()`` (from another task: a
        :class:`~pdc_core.LifecycleError` naming both, and nothing stops): the runtime
        stops even when the caller is cancelled, and a kernel's crash is raised as
        :class:`~pdc_core.ActorCrashed`.
        """
        host = self._host
        if host is None:  # in ``async with``: its end closes the nursery
            await self._terminate_all(timeout)
            return
        kit = current_kit()
        if kit.current_task() is not host.starter:
            await full_checkpoint(kit)  # a checkpoint on every path
            raise LifecycleError(
                f"shutdown() was called from task {anyio.get_current_task().name!r}, but "
                f"start() ran in task {host.starter_name!r}: await shutdown() in the task "
                "that called start()"
            )
        try:
            host.timeout = seconds_or_inf(check_timeout(timeout))  # checked before it stops
        except (TypeError, ValueError):
            await full_checkpoint(kit)  # a checkpoint on every path
            raise
        host.stop.set()
        with anyio.CancelScope(shield=True):  # the runtime stops even when cancelled
            await host.done.wait()
        error, host.error = host.error, None
        if error is not None:
            raise error
        await full_checkpoint(kit)  # a checkpoint on every path

    async def _terminate_all(self, timeout: float) -> None:
        await full_checkpoint(current_kit())  # a checkpoint on every path
        timeout = seconds_or_inf(check_timeout(timeout))  # 10**400: inf
        live = [kernel for kernel in self._kernels.values() if not kernel._finished]
        for kernel in live:
            kernel._request_terminate(timeout)
        with anyio.move_on_after(timeout):
            for kernel in live:
                await kernel.wait()
        for kernel in live:
            if not kernel._finished:
                kernel._force_terminate()
        for kernel in live:
            await kernel.wait()

    def send(
        self,
        kernel_id: str,
        message: Any,
        *,
        timeout: float | None = None,
        priority: int | None = None,
    ) -> Coroutine[Any, Any, None]:
        """Put ``message`` in the kernel's input queue (``await runtime.send(...)``).

        Its priority is ``priority`` or else the message's own ``priority`` (default
        128); out of 0..255 is a :class:`ValueError`. When the queue is full the
        kernel's backpressure policy applies (``timeout`` bounds a blocking wait,
        raising :class:`~pdc_core.MessageTimeout`). Raises
        :class:`~pdc_core.KernelNotFoundError`, :class:`~pdc_core.KernelStateError`
        (not LAUNCHED, ACTIVE or DEACTIVATED) or :class:`TypeError` (not the kernel's
        ``input_type``).
        """
        kernel = self._kernels.get(kernel_id)
        if kernel is None:
            raise KernelNotFoundError(kernel_id, list(self._kernels))
        # Returning the kernel's coroutine (rather than awaiting it here) saves a
        # coroutine layer per message; `await runtime.send(...)` reads the same.
        return kernel.send(message, timeout=timeout, priority=priority)

    def receive(self, kernel_id: str, *, timeout: float | None = None) -> Coroutine[Any, Any, Any]:
        """Return the next message from the kernel's output queue (``await`` it).

        Raises :class:`~pdc_core.MessageTimeout` (a ``TimeoutError``) after
        ``timeout`` seconds, and :class:`~pdc_core.KernelStateError` once the kernel
        has stopped and its output queue is empty.
        """
        kernel = self._kernels.get(kernel_id)
        if kernel is None:
            raise KernelNotFoundError(kernel_id, list(self._kernels))
        return kernel.receive(timeout)

    async def ask(self, kernel_id: str, message: Any, *, timeout: float | None = None) -> Any:
        """Send ``message`` and return the kernel's reply with its ``correlation_id``.

        Raises :class:`~pdc_core.KernelNotFoundError` for an unknown id, else as the
        kernel's :meth:`~pdc_core.ActorRef.ask`, whose cancellation rules apply: a
        cancelled ask leaves nothing behind.
        """
        return await self.get_kernel(kernel_id).ask(message, timeout=timeout)

    async def send_and_receive(
        self, kernel_id: str, message: Any, *, timeout: float | None = None
    ) -> Any:
        """PyDotCompute's name for :meth:`ask` (here the reply is matched by id); raises
        and cancels as it does."""
        return await self.ask(kernel_id, message, timeout=timeout)

    def get_telemetry(self, kernel_id: str) -> TelemetryT:
        """A snapshot of the kernel's telemetry, or None if telemetry is disabled."""
        kernel = self.get_kernel(kernel_id)
        if not self._enable_telemetry:
            return cast(TelemetryT, None)
        return cast(TelemetryT, kernel.telemetry())

    def get_all_telemetry(self) -> dict[str, Telemetry]:
        """Telemetry of every launched kernel (empty if telemetry is disabled)."""
        if not self._enable_telemetry:
            return {}
        return {kernel_id: k.telemetry() for kernel_id, k in self._kernels.items()}

    def get_summary(self) -> dict[str, object]:
        """Totals over all kernels."""
        all_telemetry = [k.telemetry() for k in self._kernels.values()]
        return {
            "kernel_count": len(all_telemetry),
            "total_messages_processed": sum(t.messages_processed for t in all_telemetry),
            "total_messages_dropped": sum(t.messages_dropped for t in all_telemetry),
            "total_errors": sum(t.error_count for t in all_telemetry),
        }

    def __repr__(self) -> str:
        return (
            f"<RingKernelRuntime active={self._active} kernels={len(self._kernels)} "
            f"telemetry={self._enable_telemetry}>"
        )


def _launch_definition(
    kernel_id: str,
    kernel_func: KernelFunction | RingKernelDefinition | None,
    config: _KernelConfig | None,
    input_type: type | None,
    output_type: type | None,
    queue_size: int | None,
    backpressure: Backpressure | str | None,
) -> RingKernelDefinition:
    """The definition ``launch`` starts: ``kernel_func`` (or the registered kernel) with
    what the caller gave beside it."""
    if queue_size is not None:  # checked as given: 0 is refused, never "the default"
        queue_size = check_queue_size(queue_size, "queue_size")
    if kernel_func is None:
        base = get_ring_kernel(kernel_id)
    elif isinstance(kernel_func, RingKernelDefinition):
        base = kernel_func
    else:
        base = RingKernelDefinition(kernel_func, kernel_id=kernel_id)
    if config is not None:
        if not callable(getattr(config, "definition", None)):
            raise TypeError(
                f"config must be a pdc_core.ring_kernels.lifecycle.RingKernelConfig, got {config!r}"
            )
        configured = config.definition(base.func)
        input_type = input_type or base.input_type
        output_type = output_type or base.output_type
        base = configured
    elif input_type is None and output_type is None and queue_size is None and backpressure is None:
        return base if base.kernel_id == kernel_id else base._renamed(kernel_id)
    return RingKernelDefinition(
        base.func,
        kernel_id=kernel_id,
        input_type=input_type or base.input_type,
        output_type=output_type or base.output_type,
        input_queue_size=base.input_queue_size if queue_size is None else queue_size,
        output_queue_size=base.output_queue_size if queue_size is None else queue_size,
        backpressure=base.backpressure if backpressure is None else backpressure,
        grid_size=base.grid_size,
        block_size=base.block_size,
    )
