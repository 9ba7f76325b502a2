"""Kernel-to-kernel ("K2K") pipelines: persistent kernels linked by rings.

A :class:`PersistentPipeline` ``a -> b -> c`` runs each stage as a persistent kernel
and joins neighbours with a *link*: a ring of the ring protocol with exactly one
producer (stage ``k``) and one consumer (stage ``k + 1``). The host writes only into
the first stage and reads only from the last; records between stages never go
through the host. ``docs/ring-protocol.md`` (section *Links*) is the normative
description; in short:

* **Regions.** The pipeline's *host region* is an ordinary ring region whose input
  ring holds the first stage's requests and whose output ring holds the last stage's
  replies. Its host words are the host's, as for any kernel; its ``IN_TAIL`` and
  status line belong to stage 0, its ``OUT_HEAD`` to the last stage. Every other
  stage ``k`` has a *link region* of its own whose input ring is link ``k - 1 -> k``
  (its output ring is one unused slot).
* **Roles.** Stage ``k`` is the *device* of its input region (it stores ``IN_TAIL``
  and its status words) and the *host* of the next stage's link region (it stores
  that region's ``IN_HEAD``, ``STOP`` and ``PAUSE``): every word keeps one writer,
  and a link is exactly the host/device pair the protocol already describes.
* **Order.** A stage answers each run of requests with one reply each, written in
  place into the next ring, so reply order is request order end to end.
* **Backpressure.** A stage takes a run only as long as the next ring has free
  slots for its replies: a full link stalls its producer (which sleeps); nothing is
  ever dropped.
* **Control follows the pipeline.** The host stops, pauses and resumes stage 0 only;
  each stage passes the request on to the next as that stage's host. A drain
  passes on only once the stage has forwarded everything it received, so the
  pipeline drains stage by stage. A stage stores ``STARTED``, ``PAUSED`` and
  ``DONE`` only after the next stage has stored them (so stage 0's words, which the
  host reads, speak for the whole pipeline), and copies the next stage's error
  into its own error words. A stage whose next stage finished without being asked
  (it crashed) stops at once: its records could never go anywhere.

:func:`launch_pipeline` launches the stages on a backend through its ordinary
``launch_persistent_kernel`` with the launch option ``link=`` (a :class:`StageLink`);
host backends built on :class:`~pdc_core.backend.HostWorkerKernel` accept it
(:class:`LinkedDevice` is their device side), and return a :class:`PipelineResident`
that the ordinary host session drives as if the pipeline were one kernel.
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy.typing as npt

from .._exceptions import PersistentKernelError
from ._contract import Capability
from ._persistent_kernel import PersistentKernelSpec
from ._resident import HostWaiter, ResidentKernel
from ._ring import (
    Offset,
    RingDevice,
    RingHost,
    RingLayout,
    RingMemory,
    StopMode,
    describe_dtype,
    describe_dtypes,
)

if TYPE_CHECKING:
    from ._contract import Backend

__all__ = [
    "LinkedDevice",
    "PersistentPipeline",
    "PipelineResident",
    "StageLink",
    "launch_pipeline",
]


class PersistentPipeline:
    """Persistent kernels joined by rings: ``PersistentPipeline(a, b, c)`` is ``a -> b -> c``.

    Each stage is a :class:`~pdc_core.PersistentKernel`. Link ``k`` carries records of
    stage ``k``'s ``reply_dtype``, which must equal stage ``k + 1``'s ``request_dtype``
    (a mismatch is a ``TypeError`` naming both stages and both dtypes); its capacity is
    stage ``k + 1``'s ``capacity``. To the host the pipeline is one kernel (see
    :attr:`kernel`): requests of the first stage's ``request_dtype`` in, replies of the
    last stage's ``reply_dtype`` out, one reply per request, in request order.

    Run it in an actor nursery (``await nursery.start_actor(pipeline)``, or
    :class:`~pdc_core.PersistentPipelineActor` for a backend and options) or open it
    with :func:`~pdc_core.open_persistent_pipeline`; either way the host uses the same
    ``request``/``request_batch`` (``ask``/``ask_batch``) calls as for one kernel.

    Guarantees: every record goes through every stage exactly once, in order; a full
    link stalls its producer and nothing is dropped; a crash of any stage surfaces as
    :class:`~pdc_core.ActorCrashed` whose cause, a
    :class:`~pdc_core.PersistentKernelError`, names the stage (its kernel's name and
    index); a drain stop drains stage by stage; a stop, a crash or a cancellation
    leaves no stage running.
    """

    def __init__(self, *stages: PersistentKernelSpec, name: str | None = None) -> None:
        if len(stages) == 1 and isinstance(stages[0], list | tuple):
            stages = tuple(stages[0])
        if len(stages) < 2:
            raise ValueError(
                f"a pipeline needs at least two stages, not {len(stages)}; "
                "run a single kernel as a PersistentKernel"
            )
        for index, stage in enumerate(stages):
            if not isinstance(stage, PersistentKernelSpec):
                raise TypeError(
                    f"stage {index} of a pipeline must be a PersistentKernel, "
                    f"not {type(stage).__name__}"
                )
        for index, (producer, consumer) in enumerate(itertools.pairwise(stages)):
            if producer.reply_dtype != consumer.request_dtype:
                replies, requests = describe_dtypes(producer.reply_dtype, consumer.request_dtype)
                raise TypeError(
                    f"link {index} joins stage {index} ({producer.name!r}), whose replies "
                    f"are {replies}, to stage {index + 1} ({consumer.name!r}), "
                    f"whose requests are {requests}: they must be equal"
                )
        if name is not None and (not isinstance(name, str) or not name):
            raise TypeError(f"a pipeline name must be a non-empty str, not {name!r}")
        self.stages: tuple[PersistentKernelSpec, ...] = tuple(stages)
        self.name = name if name is not None else "->".join(stage.name for stage in stages)
        self.kernel: PersistentKernelSpec = _PipelineKernel(self)

    def __len__(self) -> int:
        return len(self.stages)

    def link_layout(self, index: int) -> RingLayout:
        """The layout of stage ``index``'s region (``index >= 1``): link ``index - 1``
        as its input ring, and one unused output slot."""
        stage = self.stages[index]
        return RingLayout(stage.request_dtype, stage.reply_dtype, stage.capacity, 1)

    def __repr__(self) -> str:
        return f"<PersistentPipeline {self.name!r} stages={len(self.stages)}>"


class _PipelineKernel(PersistentKernelSpec):
    """The pipeline as the host session sees it: one kernel, first requests in, last
    replies out. Its host region has the first stage's capacity for requests and the
    last stage's for replies. It has no body of its own: :meth:`body_for` checks that
    every stage has one for the backend (naming the stage that lacks it)."""

    def __init__(self, pipeline: PersistentPipeline) -> None:
        first, last = pipeline.stages[0], pipeline.stages[-1]
        super().__init__(pipeline.name, first.request_dtype, last.reply_dtype, capacity=1)
        self.layout = RingLayout(
            first.request_dtype, last.reply_dtype, first.capacity, last.capacity
        )
        self.max_batch = first.max_batch
        self.pipeline = pipeline

    def body_for(self, backend: str) -> Any:
        for stage in self.pipeline.stages:
            stage.body_for(backend)
        return self.pipeline

    def __repr__(self) -> str:
        return f"<PersistentPipeline kernel {self.name!r}>"


# -- the two ends a stage writes into ---------------------------------------------------


class _LinkOutput:
    """The producer's end of a link: the host role on the next stage's input ring."""

    linked = True

    def __init__(self, memory: RingMemory, consumer: ResidentKernel) -> None:
        self.memory = memory
        self._host = RingHost(memory)  # the producer is the link's host end
        self._capacity = memory.layout.in_capacity
        self._slots = memory.in_slots
        self._wake = consumer.wake

    def free(self) -> int:
        return self._host.free_slots()

    def contiguous(self) -> int:
        return self._capacity - self._host.in_head % self._capacity

    def slots(self, count: int) -> npt.NDArray[Any]:
        start = self._host.in_head % self._capacity
        return self._slots[start : start + count]

    def commit(self, count: int) -> None:
        self._host.commit(count)
        self._wake()

    def consumer_started(self) -> bool:
        return self._host.started

    def consumer_done(self) -> bool:
        return self._host.done

    def consumer_paused(self) -> bool:
        return self._host.paused

    def set_pause(self, paused: bool) -> None:
        self._host.set_pause(paused)
        self._wake()

    def request_stop(self, mode: StopMode) -> None:
        self._host.request_stop(mode)
        self._wake()

    def error(self) -> tuple[int, str]:
        return self._host.error_code, self.memory.error_message()


class _ReplyOutput:
    """The last stage's end: the device role on the host region's output ring (it
    stores ``OUT_HEAD`` only; ``IN_TAIL`` and the status line there are stage 0's)."""

    linked = False

    def __init__(self, memory: RingMemory) -> None:
        self._device = RingDevice(memory)  # for load_out_tail's checks and out_head
        self._capacity = memory.layout.out_capacity
        self._slots = memory.out_slots
        self._w64 = memory.words64

    def free(self) -> int:
        device = self._device
        return self._capacity - (device.out_head - device.load_out_tail())

    def contiguous(self) -> int:
        return self._capacity - self._device.out_head % self._capacity

    def slots(self, count: int) -> npt.NDArray[Any]:
        start = self._device.out_head % self._capacity
        return self._slots[start : start + count]

    def commit(self, count: int) -> None:
        device = self._device
        device.out_head += count
        self._w64[Offset.OUT_HEAD >> 3] = device.out_head  # release

    def consumer_done(self) -> bool:
        return False  # the host reads until the pipeline is done


_Output = _LinkOutput | _ReplyOutput


class StageLink:
    """Where one stage of a pipeline sits: the launch option ``link=`` of a stage.

    Made by :func:`launch_pipeline`; a backend passes it to its device side. It names
    the stage (``index`` of ``count``, its kernel), its input region (``rings`` of the
    launch), where its replies go (the next stage's link region, or the host region's
    output ring for the last stage), and its neighbours' doorbells.
    """

    def __init__(
        self,
        pipeline: PersistentPipeline,
        index: int,
        host_region: RingMemory,
        output_region: RingMemory,
    ) -> None:
        self.pipeline = pipeline
        self.index = index
        self.count = len(pipeline.stages)
        self.kernel = pipeline.stages[index]
        self.host_region = host_region
        self.output_region = output_region
        #: The next stage (set before this stage is launched; ``None`` for the last).
        self.consumer: ResidentKernel | None = None
        #: The pipeline's last stage, which the host's signals come through (set before
        #: stage 0's launch).
        self.last: ResidentKernel | None = None
        #: The previous stage's doorbell (set once it is launched; ``None`` for stage 0).
        self.producer: ResidentKernel | None = None

    @property
    def is_last(self) -> bool:
        """Whether this is the pipeline's last stage (its output is the reply ring)."""
        return self.index == self.count - 1

    def check(self, kernel: PersistentKernelSpec, rings: RingMemory) -> None:
        """Refuse a launch whose kernel or rings are not this stage's."""
        if kernel is not self.kernel:
            raise TypeError(
                f"the link of stage {self.index} ({self.kernel.name!r}) was given kernel "
                f"{getattr(kernel, 'name', kernel)!r}"
            )
        layout = rings.layout if isinstance(rings, RingMemory) else None
        if (
            layout is None
            or layout.request_dtype != kernel.request_dtype
            or layout.in_capacity != kernel.capacity
        ):
            raise TypeError(
                f"the input region of stage {self.index} ({kernel.name!r}) must be a "
                f"RingMemory whose input ring holds {kernel.capacity} "
                f"{describe_dtype(kernel.request_dtype)} records"
            )

    def output(self) -> _Output:
        """Where this stage writes its results: the reply ring for the last stage,
        else the link into the next stage (which must have been launched first)."""
        if self.is_last:
            return _ReplyOutput(self.output_region)
        assert self.consumer is not None, "the next stage is launched first"
        return _LinkOutput(self.output_region, self.consumer)

    def wake_producer(self) -> None:
        """Ring the previous stage's doorbell (stage 0's producer is the host, which
        its worker signals by itself)."""
        producer = self.producer
        if producer is not None:
            producer.wake()

    def device(
        self, memory: RingMemory, wait_until: Callable[[Callable[[], bool]], None]
    ) -> LinkedDevice:
        """The device side of this stage for a host worker (on its thread) whose input
        region is ``memory`` and which sleeps with ``wait_until(condition)``."""
        return LinkedDevice(memory, self, wait_until)


class LinkedDevice(RingDevice):
    """The device side of one pipeline stage: :class:`~pdc_core.backend.RingDevice` on the
    stage's input region, with its replies written into the next ring (see the module
    documentation for the rules). ``wait_until(condition)`` is how the stage sleeps
    until a neighbour has moved (a host worker's doorbell)."""

    def __init__(
        self,
        memory: RingMemory,
        link: StageLink,
        wait_until: Callable[[Callable[[], bool]], None],
    ) -> None:
        super().__init__(memory)
        self._link = link
        self._out = link.output()
        self._wait_until = wait_until

    def _own_stop(self) -> int:
        return int(self._w32[Offset.STOP >> 2])

    def stop_mode(self) -> StopMode:
        """The stop word; ``NOW`` also when the next stage has finished (a broken link)."""
        mode = super().stop_mode()
        if mode is not StopMode.NOW and self._out.consumer_done():
            return StopMode.NOW
        return mode

    def next_batch(self, limit: int | None = None) -> tuple[int, int]:
        """A run limited by the requests published, the free slots of the next ring,
        ``limit``, and the end of either ring."""
        index = self.in_tail
        count = self.load_in_head() - index
        if count <= 0:  # nothing published (IN_HEAD may lag with sequenced input slots)
            return index, 0
        out = self._out
        count = min(count, self._in_cap - index % self._in_cap)
        count = min(count, out.free(), out.contiguous())
        if limit is not None:
            count = min(count, limit)
        return index, max(count, 0)

    def outputs(self, index: int, count: int) -> npt.NDArray[Any]:
        """The next ring's free slots for the run (the run starts at ``in_tail``)."""
        return self._out.slots(count)

    def publish(self, count: int) -> None:
        """Publish ``count`` replies into the next ring, then free the run's requests."""
        self._out.commit(count)  # the next stage's IN_HEAD (or the host's OUT_HEAD)
        self.out_head += count  # forwarded; never stored (stage 0's OUT_HEAD is the last's)
        self.in_tail += count
        self._batches += 1
        self._w64[Offset.IN_TAIL >> 3] = self.in_tail
        self._w64[Offset.BATCHES >> 3] = self._batches
        self._link.wake_producer()

    def mark_started(self) -> None:
        """``STARTED`` once the next stage has started (or gave up, or a stop came)."""
        out = self._out
        if isinstance(out, _LinkOutput):
            self._wait_until(
                lambda: (
                    out.consumer_started()
                    or out.consumer_done()
                    or self._own_stop() == StopMode.NOW
                )
            )
        super().mark_started()
        self._link.wake_producer()

    def set_paused(self, paused: bool) -> None:
        """Pass the pause on to the next stage, wait for its answer, then answer."""
        out = self._out
        if isinstance(out, _LinkOutput):
            out.set_pause(paused)
            self._wait_until(
                lambda: (
                    out.consumer_paused() == paused
                    or out.consumer_done()
                    or self._own_stop() != StopMode.RUN
                )
            )
        super().set_paused(paused)
        self._link.wake_producer()

    def set_error(self, code: int, message: str) -> None:
        """The stage's own error, its message prefixed with the stage's index and name."""
        link = self._link
        super().set_error(code, f"stage {link.index} ({link.kernel.name!r}): {message}")

    def mark_done(self) -> None:
        """Stop the next stage (a drain if this one drained cleanly, else now), wait
        for its ``DONE``, copy its error if this stage has none, then store ``DONE``."""
        out = self._out
        if isinstance(out, _LinkOutput):
            drained = (
                self._own_stop() == StopMode.DRAIN
                and not self._w32[Offset.ERROR_CODE >> 2]
                and int(self._w64[Offset.IN_HEAD >> 3]) == self.in_tail
            )
            out.request_stop(StopMode.DRAIN if drained else StopMode.NOW)

            def finished() -> bool:
                if out.consumer_done():
                    return True
                if self._own_stop() == StopMode.NOW:
                    out.request_stop(StopMode.NOW)  # the host escalated: pass it on
                return False

            self._wait_until(finished)
            code, message = out.error()
            if code and not self._w32[Offset.ERROR_CODE >> 2]:
                RingDevice.set_error(self, code, message)  # already names its stage
        super().mark_done()
        self._link.wake_producer()


_STAGE_PREFIX = re.compile(r"stage (\d+) \(")


def _stage_of(message: str, count: int) -> int:
    """The stage an error message names (stage 0 when it names none in range)."""
    match = _STAGE_PREFIX.match(message)
    index = int(match.group(1)) if match else 0
    return index if index < count else 0


class PipelineResident(ResidentKernel):
    """A launched pipeline as one :class:`ResidentKernel` on the host region.

    ``memory`` is the host region; the protocol-level control (stop, pause, status)
    of the base class acts on it, that is on stage 0, which passes it on. ``wake``
    rings the first and last stages; :attr:`exited` holds once every stage's
    execution has ended; :attr:`error` names the stage that failed first.
    """

    def __init__(
        self,
        backend: Backend,
        pipeline: PersistentPipeline,
        memory: RingMemory,
        stages: Sequence[ResidentKernel],
        regions: Sequence[RingMemory],
    ) -> None:
        super().__init__(backend, pipeline.kernel, memory)
        self.pipeline = pipeline
        #: The stages' resident kernels, in pipeline order.
        self.stages: tuple[ResidentKernel, ...] = tuple(stages)
        #: Each stage's input region (the host region for stage 0).
        self.regions: tuple[RingMemory, ...] = tuple(regions)
        self._first_wake = stages[0].wake
        self._last_wake = stages[-1].wake

    def wake(self) -> None:
        self._first_wake()
        self._last_wake()

    @property
    def exited(self) -> bool:
        return all(stage.exited for stage in self.stages)

    @property
    def failure(self) -> BaseException | None:
        for stage in self.stages:
            if stage.failure is not None:
                return stage.failure
        return None

    def _origin(self) -> int | None:
        """The stage whose error stage 0 reports: the index its message begins with
        (``stage <index> (``, which every stage's own error carries and a stage that
        adopts the next one's error keeps). Only the host region is read."""
        if not self.memory.load32(Offset.ERROR_CODE):
            return None
        return _stage_of(self.memory.error_message(), len(self.stages))

    @property
    def error_cause(self) -> BaseException | None:
        origin = self._origin()
        return None if origin is None else self.stages[origin].error_cause

    @property
    def error(self) -> PersistentKernelError | None:
        """The failure of the stage that failed: its kernel's name, its code, and a
        message naming its index and the pipeline."""
        origin = self._origin()
        if origin is not None:
            code = self.memory.load32(Offset.ERROR_CODE)
            error = PersistentKernelError(
                self.pipeline.stages[origin].name,
                code,
                f"{self.memory.error_message()} (in pipeline {self.pipeline.name!r})",
            )
            error.__cause__ = self.stages[origin].error_cause
            return error
        for index, stage in enumerate(self.stages):
            failure = stage.error
            if failure is not None:
                error = PersistentKernelError(
                    failure.kernel, failure.code, f"stage {index}: {failure.detail}"
                )
                error.__cause__ = failure.__cause__
                return error
        return None

    def host_waiter(self) -> HostWaiter:
        waiter = self.stages[-1].pipeline_host_waiter(self.stages[0])
        return waiter if waiter is not None else super().host_waiter()

    def release(self) -> None:
        for stage in self.stages:
            stage.release()
        for region in self.regions[1:]:
            region.detach()


def launch_pipeline(
    backend: Backend, pipeline: PersistentPipeline, memory: RingMemory, **options: Any
) -> PipelineResident:
    """Allocate the link regions and launch every stage of ``pipeline`` on ``backend``
    (the last first, so each stage's consumer exists when it starts); ``memory`` is the
    host region, initialised for ``pipeline.kernel.layout``.

    ``options`` go to every stage's ``launch_persistent_kernel``, with ``link=``. A
    backend without :attr:`Capability.PIPELINES` (or persistent kernels) raises
    :class:`~pdc_core.CapabilityError` before anything is allocated. If a launch
    fails, the stages already launched are stopped before the error propagates.

    A backend that launches pipelines its own way -- a GPU backend that places the
    links in device memory and launches every stage at once -- defines
    ``launch_pipeline(pipeline, memory, **options)``, returning a
    :class:`PipelineResident`; it is called instead, after the same checks.
    """
    if not isinstance(pipeline, PersistentPipeline):
        raise TypeError(f"expected a PersistentPipeline, not {type(pipeline).__name__}")
    if memory.layout.with_sequenced_input(False) != pipeline.kernel.layout:
        raise TypeError("memory must be a RingMemory allocated for the pipeline's host region")
    if "link" in options:
        raise TypeError("the launch option 'link' is set by the pipeline itself")
    backend.require(Capability.PERSISTENT_KERNELS, "run persistent kernels")
    backend.require(Capability.PIPELINES, "link persistent kernels into a pipeline")
    own_launch = getattr(backend, "launch_pipeline", None)
    if own_launch is not None:
        resident = own_launch(pipeline, memory, **options)
        if not isinstance(resident, PipelineResident):
            raise TypeError(
                f"{type(backend).__name__}.launch_pipeline returned "
                f"{type(resident).__name__}, not a PipelineResident"
            )
        return resident
    stages = pipeline.stages
    count = len(stages)
    regions = [memory] + [
        RingMemory.allocate(backend, pipeline.link_layout(index), exact=True)
        for index in range(1, count)
    ]
    links = [
        StageLink(pipeline, index, memory, regions[index + 1] if index + 1 < count else memory)
        for index in range(count)
    ]
    residents: list[ResidentKernel | None] = [None] * count
    try:
        for index in reversed(range(count)):
            link = links[index]
            if index + 1 < count:
                link.consumer = residents[index + 1]
            if index == 0:
                link.last = residents[-1]
            resident = backend.launch_persistent_kernel(
                stages[index], regions[index], link=link, **options
            )
            residents[index] = resident
            if index + 1 < count:
                links[index + 1].producer = resident
    except BaseException:
        _stop_launched(residents, regions)
        raise
    launched = [resident for resident in residents if resident is not None]
    return PipelineResident(backend, pipeline, memory, launched, regions)


def _stop_launched(residents: list[ResidentKernel | None], regions: list[RingMemory]) -> None:
    """A launch failed: stop the stages already running (their producer never came, so
    the host may store their stop words) and wait for them, briefly."""
    for index, resident in enumerate(residents):
        if resident is None:
            continue
        RingHost.force_stop(regions[index])
        resident.wake()
    for resident in residents:
        if resident is not None:
            for _ in range(1000):
                if resident.exited:
                    resident.release()
                    break
                _sleep_briefly()


def _sleep_briefly() -> None:
    time.sleep(0.005)
