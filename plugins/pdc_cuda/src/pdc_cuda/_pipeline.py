"""Kernel-to-kernel pipelines on CUDA: every stage a resident block, links in device memory.

``CudaBackend.launch_pipeline(pipeline, memory, **options)`` is what
:func:`pdc_core.backend.launch_pipeline` calls on the cuda backend. It runs each stage
of a :class:`~pdc_core.PersistentPipeline` as a resident ring kernel (one thread block,
the stage's own body, ``ring_kernel.cu`` wired as a stage) on a non-blocking stream of
its own, and joins neighbours with *links*: ring regions of the ring protocol whose
words follow ``docs/ring-protocol.md`` section 11 (control passes down, status comes
back up, a stage's error words name it, a drain goes stage by stage, a stop NOW wins).

Where a link lives follows where its two stages run (:func:`link_placement`): two
stages on one device share a link in that device's memory, whose words they access
with device-scope acquire/release; stages on different devices would share mapped
pinned host memory at system scope. The host region (stage 0's requests, the last
stage's replies) is mapped pinned memory at system scope, as for a single kernel, so
the host side is the ordinary session.

Everything is prepared before any stage is launched -- every stage compiled and
loaded, every link allocated and initialised, device state copied -- and then the
stages are launched back to back, the last first. Nothing that allocates device or
pinned memory, loads a module or copies memory is issued between two launches (the
CUDA Programming Guide's "implicit synchronization" between streams).

Stages wait for each other (a stage's ``STARTED`` waits for the next stage's), so they
must all be resident at once: a pipeline needs one free SM-slot per stage. It is
refused with :class:`~pdc_core.CapabilityError` when its stages plus the kernels
already resident on the device exceed :func:`resident_capacity` (the device's SMs,
and at most 128 resident grids), or when the device cannot run kernels concurrently;
in a green context, when they do not fit its partition's SMs beside the kernels already
resident in one (:func:`check_partition`, once the stages are loaded and the driver has
said how many SMs the partition got).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pdc_core import Backend, CapabilityError, PersistentPipeline
from pdc_core.backend import (
    MemoryKind,
    PipelineResident,
    RingHost,
    RingLayout,
    RingMemory,
)

from ._exceptions import CudaCompileError
from ._persistent import (
    NO_OPTIONS,
    CudaResidentKernel,
    LaunchOptions,
    check_device,
    render_kernel,
)
from ._places import LaunchSite, ResidentPlace, check_state
from ._properties import CudaDeviceProperties
from ._residency import Residency
from ._ring_source import KERNEL_NAME, CudaRingBody, RingWiring, Scope

__all__ = [
    "MAX_RESIDENT_GRIDS",
    "CudaLink",
    "CudaPipelineResident",
    "LinkPlacement",
    "launch_pipeline",
    "link_placement",
    "resident_capacity",
    "stage_wirings",
]

#: Grids a device keeps resident at once, from compute capability 7.0 on (CUDA C++
#: Programming Guide, "Features and Technical Specifications": maximum number of
#: resident grids per device).
MAX_RESIDENT_GRIDS = 128


@dataclass(frozen=True)
class LinkPlacement:
    """Where a link's region lives and at what scope its two stages order their accesses."""

    memory: MemoryKind
    scope: Scope


def link_placement(producer_device: int, consumer_device: int) -> LinkPlacement:
    """The memory of the link from a stage on ``producer_device`` to one on
    ``consumer_device``: the device's own memory at device scope when both run on one
    device (neither side crosses a bus), mapped pinned host memory at system scope when
    they do not (the only memory both can address without peer mappings)."""
    if producer_device == consumer_device:
        return LinkPlacement(MemoryKind.DEVICE, "device")
    return LinkPlacement(MemoryKind.MAPPED, "system")


def resident_capacity(props: CudaDeviceProperties) -> int:
    """How many one-block resident kernels a device (``props``) is guaranteed to hold at
    once: one per SM (a block that fits an SM alone always finds one free), and no more
    than :data:`MAX_RESIDENT_GRIDS`."""
    multiprocessors = props.multiprocessor_count or 1
    return min(multiprocessors, MAX_RESIDENT_GRIDS)


def check_co_residency(site: LaunchSite, stages: int) -> None:
    """Refuse, with :class:`CapabilityError`, a pipeline whose stages cannot all be
    resident beside the kernels already resident on the device."""
    props = site.properties
    where = f"{site.name} ({props.name})"
    if props.extra.get("concurrentKernels") == 0:
        raise CapabilityError(
            f"{where} cannot run kernels concurrently (concurrentKernels=0): the stages of a "
            "pipeline must all be resident at once"
        )
    resident = len(site.residency.running())
    capacity = resident_capacity(props)
    if stages + resident > capacity:
        raise CapabilityError(
            f"a pipeline of {stages} stages cannot be resident on {where}: every stage is a "
            f"resident block and they wait for each other, so all must run at once, but the "
            f"device holds at most {capacity} resident kernels (one per SM, "
            f"{props.multiprocessor_count} SMs, at most {MAX_RESIDENT_GRIDS} grids) and "
            f"{resident} are resident already"
        )


def check_partition(site: LaunchSite, kernel: Any, stages: int) -> None:
    """Refuse, with :class:`CapabilityError`, a pipeline loaded (``kernel`` is its first
    stage) into a context with a partition of the device's SMs (placement ``"green"``)
    whose stages cannot all be resident there beside the kernels already resident in a
    partition. Every green context of a device is made from the same split of its SMs,
    so the kernels of all of them count."""
    sms = site.place.partition(kernel)
    if sms is None:
        return
    resident = sum(1 for other in site.residency.running() if other.partition is not None)
    capacity = min(sms, MAX_RESIDENT_GRIDS)
    if stages + resident > capacity:
        raise CapabilityError(
            f"a pipeline of {stages} stages cannot be resident in the green context of "
            f"{site.name}: every stage is a resident block and they wait for each other, "
            f"so all must run at once, but its partition of {sms} SMs holds at most "
            f"{capacity} resident kernels and {resident} are resident there already "
            "(a larger partition: CudaBackend(green_sms=...); or placement 'own')"
        )


class CudaLink:
    """The region of one link: ``layout`` (the consumer's input ring, one unused output
    slot) in the memory :func:`link_placement` chose, in the context of the stages'
    kernels (``anchor`` is one of them), initialised before any stage runs.

    :attr:`image` is a host :class:`~pdc_core.backend.RingMemory` of the region: the
    region itself in mapped memory, else a host copy that :meth:`refresh` brings up to
    date (the host never reads device memory otherwise).
    """

    def __init__(
        self, site: LaunchSite, anchor: Any, layout: RingLayout, placement: LinkPlacement
    ) -> None:
        self.site = site
        self.layout = layout
        self.placement = placement
        self.device_array: Any = None
        place = site.place
        if placement.memory is MemoryKind.MAPPED:
            self.image = RingMemory.allocate(site.backend, layout, exact=True)
            self.address = place.region_address(anchor, self.image)
            return
        self.image = RingMemory.from_buffer(layout)  # zeroes and the header
        self.device_array = place.upload(anchor, self.image.base)
        self.address = place.address(self.device_array)

    @property
    def scope(self) -> Scope:
        return self.placement.scope

    def store_stop_now(self) -> None:
        """Store ``STOP = NOW`` into the region, as its producer would: only for a
        stage whose producer never ran (a launch that failed half way)."""
        if self.device_array is None:
            RingHost.force_stop(self.image)
            return
        offset, word = RingHost.force_stop_word()
        self.site.place.write(self.device_array, word, offset)

    def refresh(self) -> RingMemory:
        """:attr:`image` with the region's current bytes (copied on a side stream, never
        waiting for the device); returns it."""
        if self.device_array is not None:
            self.site.place.read(self.device_array, self.image.base)
        return self.image

    def free(self) -> None:
        """Let go of the region (after every stage has exited). Device memory of a
        context pdc owns goes to that context's free (deferred while a kernel runs
        there); while other kernels are resident the rest goes to
        :meth:`Residency.defer_free`: ``cudaFree`` and ``cudaFreeHost`` may wait for a
        running kernel."""
        owner = self.image.owner
        self.image.detach()
        array, self.device_array = self.device_array, None
        free = getattr(array, "free", None)
        if callable(free):  # memory of a context pdc owns: its own deferral queue
            free()
            array = None
        if self.site.residency.collect():
            self.site.residency.defer_free((array, owner))


class CudaPipelineResident(PipelineResident):
    """A pipeline resident on a CUDA device: a :class:`~pdc_core.backend.PipelineResident`
    whose stages are :class:`~pdc_cuda.CudaResidentKernel` blocks, each on its own stream.

    :attr:`links` are the link regions; :attr:`regions` holds the host region and each
    link's host :attr:`CudaLink.image`. Call :meth:`read_links` for a snapshot of the
    links' words (device-memory links are copied on a side stream).
    """

    def __init__(
        self,
        backend: Backend,
        pipeline: PersistentPipeline,
        memory: RingMemory,
        stages: Sequence[CudaResidentKernel],
        links: Sequence[CudaLink],
    ) -> None:
        images = [link.image for link in links]
        super().__init__(backend, pipeline, memory, stages, [memory, *images])
        self.links: tuple[CudaLink, ...] = tuple(links)

    def read_links(self) -> list[RingMemory]:
        """Every link region's current bytes, as host ring regions (stage 1 first)."""
        return [link.refresh() for link in self.links]

    def release(self) -> None:
        """Release every stage, then the links' memory (deferred while kernels are
        resident). Called once, after every stage has exited."""
        for stage in self.stages:
            stage.release()
        for link in self.links:
            # The last words, for a status read after the stop; a failed context (a
            # stage faulted) has none to give, and releasing must not raise.
            with contextlib.suppress(Exception):
                link.refresh()
            link.free()


@dataclass
class _Stage:
    """One stage, prepared: compiled, its state on the device, its stream; not launched."""

    resident: CudaResidentKernel
    threads: int
    input_address: int
    output_address: int


def _compile_stages(
    place: ResidentPlace,
    pipeline: PersistentPipeline,
    rendered: Sequence[tuple[CudaRingBody, str, tuple[str, ...]]],
) -> list[Any]:
    """Compile and load every stage into one context; a compile error names its stage."""
    try:
        return place.compile([(source, KERNEL_NAME, options) for _, source, options in rendered])
    except CudaCompileError as exc:
        index = next((i for i, (_, source, _) in enumerate(rendered) if source == exc.source), None)
        if index is None:
            raise
        raise CudaCompileError(
            exc.name,
            exc.log,
            exc.source,
            exc.options,
            what=f"stage {index} ({pipeline.stages[index].name!r}) of pipeline {pipeline.name!r}",
        ) from exc


def stage_wirings(
    pipeline: PersistentPipeline, link_scopes: Sequence[Scope], sequenced_input: bool
) -> list[RingWiring]:
    """How each stage's kernel is rendered: its input ring the host region (stage 0,
    system scope, sequenced slots if the host region has them) or link ``index - 1``,
    its output ring link ``index`` (``output_link``) or the host region (the last stage);
    ``link_scopes[i]`` is link ``i``'s scope (from :func:`link_placement`)."""
    count = len(pipeline.stages)
    if len(link_scopes) != count - 1:
        raise ValueError(f"{count} stages need {count - 1} link scopes, not {len(link_scopes)}")
    return [
        RingWiring(
            input_scope="system" if index == 0 else link_scopes[index - 1],
            output_scope="system" if index == count - 1 else link_scopes[index],
            output_link=index != count - 1,
            stage=(index, pipeline.stages[index].name),
            sequenced_input=index == 0 and sequenced_input,
        )
        for index in range(count)
    ]


def launch_pipeline(
    site: LaunchSite,
    pipeline: PersistentPipeline,
    memory: RingMemory,
    options: LaunchOptions = NO_OPTIONS,
) -> CudaPipelineResident:
    """Prepare every stage and link of ``pipeline``, then launch the stages back to back;
    see the module documentation. ``memory`` is the host region the core allocated
    (mapped) and initialised. ``options`` are the single kernel's (``threads``, back-off,
    ``allow_watchdog``, ``compile_options``), applied to every stage (``context`` chose
    ``site``).

    Raises :class:`~pdc_core.CapabilityError` before anything is allocated when the
    device cannot hold every stage resident, :class:`~pdc_cuda.CudaCompileError` naming
    the stage whose body does not compile, and, if a launch fails, stops the stages
    already launched (and waits for their streams) before re-raising.
    """
    count = len(pipeline.stages)
    check_device(site, options.allow_watchdog)
    check_co_residency(site, count)
    place = site.place
    device = site.properties.index
    placements = [link_placement(device, device) for _ in range(1, count)]
    wirings = stage_wirings(
        pipeline, [placement.scope for placement in placements], memory.layout.sequenced_input
    )
    rendered = [
        render_kernel(pipeline.stages[index], options, wiring)
        for index, wiring in enumerate(wirings)
    ]
    states = [check_state(stage.state, f"placement {place.kind!r}") for stage in pipeline.stages]
    # Every stage compiled and loaded, into one context, before anything else.
    compiled = _compile_stages(place, pipeline, rendered)
    check_partition(site, compiled[0], count)  # the partition is known once loaded
    links: list[CudaLink] = []
    stages: list[_Stage] = []
    try:
        for index in range(1, count):
            links.append(
                CudaLink(site, compiled[0], pipeline.link_layout(index), placements[index - 1])
            )
        host_address = place.region_address(compiled[0], memory)
        for index, (body, _, _) in enumerate(rendered):
            first, last = index == 0, index == count - 1
            kernel = compiled[index]
            host_state = states[index]
            state = None if host_state is None else place.upload(kernel, host_state)
            resident = CudaResidentKernel(
                site.backend,
                pipeline.stages[index],
                memory if first else links[index - 1].image,
                kernel,
                place.create_stream(kernel),
                state,
                body,
                place=place,
                residency=site.residency,
            )
            stages.append(
                _Stage(
                    resident,
                    min(body.threads, kernel.max_threads_per_block),
                    host_address if first else links[index - 1].address,
                    host_address if last else links[index].address,
                )
            )
        _launch_all(site.residency, stages, memory, links)
    except BaseException:
        for stage in stages:
            stage.resident.stream.discard()
        for link in links:
            link.free()
        raise
    return CudaPipelineResident(
        site.backend, pipeline, memory, [stage.resident for stage in stages], links
    )


def _launch_all(
    residency: Residency, stages: Sequence[_Stage], memory: RingMemory, links: Sequence[CudaLink]
) -> None:
    """Launch the prepared stages, the last first, with nothing in between. If a launch
    raises, every stage that may have been queued is stopped -- ``STOP = NOW`` into its
    input region, which no running producer owns -- and its stream waited for."""
    launched: list[int] = []
    try:
        for index in reversed(range(len(stages))):
            stage = stages[index]
            resident = stage.resident
            state = resident.state_array
            residency.register(resident)
            launched.append(index)
            resident.compiled.launch(
                (1,),
                (stage.threads,),
                (
                    np.uint64(stage.input_address),
                    np.uint64(stage.output_address),
                    state if state is not None else np.uint64(0),
                ),
                stream=resident.stream,
            )
    except BaseException:
        for index in launched:
            if index == 0:
                RingHost.force_stop(memory)
            else:
                with contextlib.suppress(Exception):
                    links[index - 1].store_stop_now()
        for index in launched:
            resident = stages[index].resident
            with contextlib.suppress(Exception):
                resident.stream.synchronize()
            residency.forget(resident)
        raise
