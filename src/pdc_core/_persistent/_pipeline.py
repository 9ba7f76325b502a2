"""The host side of a kernel-to-kernel pipeline: a session, and the pipeline as an actor.

A :class:`~pdc_core.PersistentPipeline` launched on a backend
(:func:`~pdc_core.backend.launch_pipeline`) is one :class:`~pdc_core.backend.ResidentKernel`
on its *host region*: requests of the first stage in, replies of the last stage out.
So the host side is the ordinary :class:`~pdc_core.PersistentKernelSession` (its
routing, backpressure, stop and crash handling), started differently::

    async with open_persistent_pipeline(PersistentPipeline(a, b, c), "cpu") as pipe:
        reply = await pipe.request(record)            # through a, b and c
        replies = await pipe.request_batch(records)   # one host write, one host read

    async with pdc_core.open_nursery() as nursery:
        ref = await nursery.start_actor(PersistentPipeline(a, b, c))
        replies = await ref.ask_batch(records)

Guarantees, on top of the session's and the actor's: a crash in any stage fails
every pending request with :class:`~pdc_core.ActorCrashed` whose cause names the
stage (its kernel's name, and ``stage <index>`` in the message); ``stop(drain=True)``
drains the stages one after the other, so every request published before the stop is
answered; ``stop()`` stops every stage after its batch in hand and fails the requests
still in flight with :class:`~pdc_core.ActorStopped`; leaving the session or the
nursery, cancelled or not, ends every stage's execution (on host backends: joins every
stage's thread) before the memory is released.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from .._actors import StartOptions, runner_for
from .._backend._links import PersistentPipeline, launch_pipeline
from .._backend._persistent_kernel import PersistentKernelSpec
from .._backend._ring import RingMemory
from .._loop import check_duration, current_kit, full_checkpoint, seconds_or_inf
from ._actor import PersistentKernelActor
from ._leader import DEFAULT_SPIN_LIMIT, ReplyWait
from ._session import (
    PersistentKernelSession,
    backend_for,
)
from ._session_types import _check_session_options

if TYPE_CHECKING:
    from .._backend._contract import Backend

__all__ = ["PersistentPipelineActor", "PipelineSession", "open_persistent_pipeline"]


def _pipeline_of(target: PersistentPipeline | PersistentKernelSpec) -> PersistentPipeline:
    if isinstance(target, PersistentPipeline):
        return target
    pipeline = getattr(target, "pipeline", None)
    if isinstance(pipeline, PersistentPipeline) and pipeline.kernel is target:
        return pipeline
    raise TypeError(f"expected a PersistentPipeline, not {type(target).__name__}")


def _pipeline_backend(pipeline: PersistentPipeline, backend: Backend | str | None) -> Backend:
    """The backend that will run every stage of ``pipeline`` (see ``backend_for``):
    a stage without a body for it raises :class:`~pdc_core.KernelBodyMissing`."""
    resolved = backend_for(pipeline.stages[0], backend)
    for stage in pipeline.stages[1:]:
        backend_for(stage, resolved)
    return resolved


class PipelineSession(PersistentKernelSession):
    """The host session of a pipeline: a :class:`~pdc_core.PersistentKernelSession`
    whose kernel is the pipeline's (:attr:`PersistentPipeline.kernel`) and whose
    resident is a :class:`~pdc_core.backend.PipelineResident`. Open it with
    :func:`open_persistent_pipeline`."""

    @classmethod
    async def start(
        cls,
        kernel: PersistentPipeline | PersistentKernelSpec,
        backend: Backend | str | None = None,
        *,
        launch_timeout: float = 10.0,
        receive_window: int | None = None,
        stop_timeout: float = 5.0,
        wait: ReplyWait = "sleep",
        spin_limit: float = DEFAULT_SPIN_LIMIT,
        **options: Any,
    ) -> PipelineSession:
        """Allocate the host region and the links, launch every stage (the last
        first) and wait until all of them are resident.

        ``wait`` and ``spin_limit`` are the session's (how callers wait for replies).
        Raises what :meth:`PersistentKernelSession.start` raises, naming the stage
        at fault; a pipeline that does not start within ``launch_timeout`` seconds is
        stopped (every stage) before :class:`~pdc_core.PersistentKernelError` is raised.
        A caller already cancelled on entry launches nothing; cancelled while it waits,
        every stage is stopped (shielded) before the cancellation propagates.
        """
        launch_timeout = seconds_or_inf(check_duration(launch_timeout, "launch_timeout"))
        _check_session_options(receive_window, stop_timeout, wait, spin_limit)  # before a launch
        await full_checkpoint(current_kit())  # a pending cancellation launches nothing
        pipeline = _pipeline_of(kernel)
        resolved = _pipeline_backend(pipeline, backend)
        resolved.check_launch_options(options)  # a misspelt option allocates nothing
        memory = RingMemory.allocate(resolved, pipeline.kernel.layout)
        resident = launch_pipeline(resolved, pipeline, memory, **options)
        session = cls(
            pipeline.kernel,
            resolved,
            resident,
            receive_window=receive_window,
            stop_timeout=stop_timeout,
            wait=wait,
            spin_limit=spin_limit,
        )
        # Stage 0 stores STARTED once every later stage has.
        await session._handshake(
            launch_timeout, pipeline.name, "its stages did not all signal STARTED"
        )
        return session


@asynccontextmanager
async def open_persistent_pipeline(
    pipeline: PersistentPipeline,
    backend: Backend | str | None = None,
    *,
    launch_timeout: float = 10.0,
    receive_window: int | None = None,
    stop_timeout: float = 5.0,
    **options: Any,
) -> AsyncIterator[PipelineSession]:
    """Launch ``pipeline`` and yield its session; stop every stage on exit.

    ::

        async with open_persistent_pipeline(PersistentPipeline(a, b, c), "cpu") as pipe:
            replies = await pipe.request_batch(records)

    The session is a :class:`~pdc_core.PersistentKernelSession`: ``request``,
    ``request_batch``, ``send``/``receive``, ``pause``/``resume`` and
    ``stop(drain=...)`` act on the pipeline as a whole. ``options`` go to every
    stage's launch. On exit the stages are stopped (shielded, within
    ``stop_timeout``) and every stage's execution has ended before the memory is freed.
    """
    session = await PipelineSession.start(
        pipeline,
        backend,
        launch_timeout=launch_timeout,
        receive_window=receive_window,
        stop_timeout=stop_timeout,
        **options,
    )
    async with session:
        yield session


class PersistentPipelineActor(PersistentKernelActor):
    """Runs a :class:`~pdc_core.PersistentPipeline` as one actor of an actor nursery.

    ``start_actor(pipeline)`` is ``start_actor(PersistentPipelineActor(pipeline))``.
    The handle is a :class:`~pdc_core.KernelActorRef`: ``ask``/``ask_batch`` send
    requests of the first stage's dtype and return replies of the last stage's;
    ``stop(drain=True)`` drains the stages one after the other. The arguments are
    those of :class:`~pdc_core.PersistentKernelActor` (``name`` defaults to the
    pipeline's name); ``options`` go to every stage's launch.
    """

    def __init__(
        self,
        pipeline: PersistentPipeline,
        backend: Backend | str | None = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(pipeline, PersistentPipeline):
            raise TypeError(f"expected a PersistentPipeline, not {type(pipeline).__name__}")
        self.pipeline = pipeline
        super().__init__(pipeline.kernel, _pipeline_backend(pipeline, backend), **kwargs)

    async def start_session(self) -> PersistentKernelSession:
        """Launch every stage and return the pipeline's session once all are resident
        (:meth:`PipelineSession.start`, whose errors and cancellation apply)."""
        return await PipelineSession.start(
            self.pipeline,
            self._backend,
            launch_timeout=self._launch_timeout,
            receive_window=self._receive_window,
            stop_timeout=self._stop_timeout,
            **self._options,
        )


@runner_for.register(PersistentPipeline)
def _pipeline_runner(
    target: PersistentPipeline, /, args: tuple[Any, ...], options: StartOptions
) -> PersistentPipelineActor:
    """``start_actor(pipeline)``: the pipeline on the best available backend."""
    if args:
        raise TypeError("positional arguments do not apply to a PersistentPipeline")
    return PersistentPipelineActor(target, name=options.name, paused=options.paused)
