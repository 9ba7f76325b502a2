"""The host side of CUDA pipelines with a fake device (no GPU): where links live, what is
refused, the order of preparation and launches, and a launch that fails half way.

The fake backend is the real ``CudaBackend`` bookkeeping (resident kernels, deferred
frees) with device memory, compilation, streams and launches replaced by host objects
that log what is done, so the launch path runs here exactly as on a device.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("pdc_cuda", reason="pdc-cuda is not installed: pip install -e plugins/pdc_cuda")
from cuda_pipeline_support import ADD_ONE, MINUS_THREE, TWICE, abc, stage
from cuda_test_support import fake_backend
from pdc_cuda import CudaCompileError
from pdc_cuda._pipeline import (
    MAX_RESIDENT_GRIDS,
    CudaPipelineResident,
    LinkPlacement,
    check_co_residency,
    link_placement,
    resident_capacity,
)

from pdc_core import CapabilityError, PersistentPipeline
from pdc_core.backend import (
    MemoryKind,
    Offset,
    RingMemory,
    StopMode,
    launch_pipeline,
)


class FakeDeviceArray:
    """Device memory, held in host memory: what the launch path does to it is visible."""

    def __init__(self, host: np.ndarray, log: list[tuple[Any, ...]]) -> None:
        self.host = host
        self.log = log
        self.data = type("MemoryPointer", (), {"ptr": int(host.ctypes.data)})()

    def __getitem__(self, index: slice) -> FakeDeviceArray:
        return FakeDeviceArray(self.host[index], self.log)

    def set(self, values: np.ndarray, stream: Any = None) -> None:
        self.log.append(("copy to device", len(values)))
        self.host[...] = values

    def get(self, stream: Any = None, out: np.ndarray | None = None) -> np.ndarray:
        assert out is not None
        out[...] = self.host
        return out


class FakeStream:
    def __init__(self, log: list[tuple[Any, ...]]) -> None:
        self.log = log
        self.cupy = object()
        self.done = False  # a resident kernel's stream: running until the test says
        self.synchronized = False

    def synchronize(self) -> None:
        self.synchronized = True
        self.log.append(("stream.synchronize",))

    def close(self) -> None:
        pass

    def discard(self) -> None:
        pass


class FakeCompiled:
    """A compiled stage: records its source and its launches."""

    max_threads_per_block = 1024

    def __init__(self, source: str, log: list[tuple[Any, ...]], fail: bool) -> None:
        self.source = source
        self.log = log
        self.fail = fail

    def launch(self, grid: Any, block: Any, args: Any, *, stream: Any = None) -> None:
        self.log.append(("launch", _stage_of(self.source), int(args[0]), int(args[1])))
        if self.fail:
            raise RuntimeError("cudaErrorLaunchOutOfResources")


def _stage_of(source: str) -> str:
    marker = '#define PDC_STAGE_PREFIX "stage '
    start = source.index(marker) + len(marker)
    return source[start]


class Device:
    """A fake backend and the log of everything done to it."""

    def __init__(self, *, fail_launch_of: str | None = None, **properties: Any) -> None:
        self.log: list[tuple[Any, ...]] = []
        self.streams: list[FakeStream] = []
        self.backend = backend = fake_backend(**properties)
        log = self.log

        def allocate(shape: Any, dtype: Any, kind: Any = MemoryKind.DEVICE) -> Any:
            host = np.zeros(shape, dtype)
            log.append(("allocate", MemoryKind(kind).value, host.nbytes))
            return FakeDeviceArray(host, log) if kind is MemoryKind.DEVICE else host

        def to_device(host: np.ndarray, out: Any = None, stream: Any = None) -> Any:
            log.append(("copy to device", host.nbytes))
            if out is None:
                return FakeDeviceArray(np.array(host), log)
            out.host[...] = host
            return out

        def compile_kernel(source: str, name: str, options: Any = ()) -> FakeCompiled:
            log.append(("compile", _stage_of(source)))
            return FakeCompiled(source, log, fail=_stage_of(source) == fail_launch_of)

        def create_stream() -> FakeStream:
            stream = FakeStream(log)
            self.streams.append(stream)
            log.append(("stream",))
            return stream

        backend.allocate = allocate
        backend.to_device = to_device
        backend.compile_kernel = compile_kernel
        backend.create_stream = create_stream

    def host_region(self, pipeline: PersistentPipeline) -> RingMemory:
        return RingMemory.from_buffer(pipeline.kernel.layout)


def test_links_live_in_device_memory_between_stages_of_one_device():
    assert link_placement(0, 0) == LinkPlacement(MemoryKind.DEVICE, "device")
    assert link_placement(1, 1) == LinkPlacement(MemoryKind.DEVICE, "device")
    assert link_placement(0, 1) == LinkPlacement(MemoryKind.MAPPED, "system")


def test_the_device_holds_one_resident_block_per_sm_and_at_most_128_grids():
    assert resident_capacity(fake_backend(multiProcessorCount=8).properties) == 8
    assert (
        resident_capacity(fake_backend(multiProcessorCount=132).properties)
        == MAX_RESIDENT_GRIDS
        == 128
    )


def test_a_pipeline_larger_than_the_device_is_refused_before_anything_is_allocated():
    device = Device(multiProcessorCount=2)
    with pytest.raises(CapabilityError) as refused:
        launch_pipeline(device.backend, abc(), device.host_region(abc()))
    message = str(refused.value)
    assert "a pipeline of 3 stages cannot be resident" in message
    assert "at most 2 resident kernels (one per SM, 2 SMs" in message
    assert device.log == []


def test_kernels_already_resident_count_against_the_device():
    backend = fake_backend(multiProcessorCount=4)
    backend.residency.register(type("Resident", (), {"exited": False})())
    backend.residency.register(type("Resident", (), {"exited": False})())
    site = backend.launch_site("shared")
    with pytest.raises(CapabilityError, match="and 2 are resident already"):
        check_co_residency(site, 3)
    check_co_residency(site, 2)


def test_a_device_without_concurrent_kernels_is_refused():
    with pytest.raises(CapabilityError, match="cannot run kernels concurrently"):
        check_co_residency(fake_backend(concurrentKernels=0).launch_site("shared"), 2)


def test_everything_is_prepared_before_the_first_launch_and_the_last_stage_launches_first():
    device = Device()
    pipeline = abc((4, 3, 5))
    memory = device.host_region(pipeline)
    resident = launch_pipeline(device.backend, pipeline, memory)
    assert isinstance(resident, CudaPipelineResident)
    log = device.log
    first_launch = next(i for i, event in enumerate(log) if event[0] == "launch")
    assert all(event[0] == "launch" for event in log[first_launch:])
    assert [event[0] for event in log[:first_launch]].count("compile") == 3
    host = memory.address
    link1, link2 = (link.address for link in resident.links)
    assert log[first_launch:] == [
        ("launch", "2", link2, host),  # the last stage first: link 2 in, host region out
        ("launch", "1", link1, link2),
        ("launch", "0", host, link1),
    ]
    # Both links are device memory, initialised (zeroes and the header) before launch.
    for index, link in enumerate(resident.links, start=1):
        assert link.placement == LinkPlacement(MemoryKind.DEVICE, "device")
        image = RingMemory.from_buffer(pipeline.link_layout(index))
        assert bytes(link.device_array.host) == bytes(image.base)
    assert len(device.backend.resident_kernels()) == 3
    assert len({id(stream) for stream in device.streams}) == 3  # a stream per stage


def test_each_stage_is_compiled_for_its_place_in_the_pipeline():
    device = Device()
    pipeline = abc()
    resident = launch_pipeline(device.backend, pipeline, device.host_region(pipeline))
    sources = [stage.compiled.source for stage in resident.stages]
    wiring = [
        ("system", "device", "1", "stage 0 ('a'): "),
        ("device", "device", "1", "stage 1 ('b'): "),
        ("device", "system", "0", "stage 2 ('c'): "),
    ]
    for source, (scope_in, scope_out, link, prefix) in zip(sources, wiring, strict=True):
        assert f"#define PDC_IN_SCOPE cuda::thread_scope_{scope_in}\n" in source
        assert f"#define PDC_OUT_SCOPE cuda::thread_scope_{scope_out}\n" in source
        assert f"#define PDC_OUT_LINK {link}\n" in source
        assert f'#define PDC_STAGE_PREFIX "{prefix}"\n' in source


def test_stage_0_polls_the_sequence_words_of_a_sequenced_host_region():
    device = Device()
    pipeline = abc()
    memory = RingMemory.from_buffer(pipeline.kernel.layout.with_sequenced_input())
    resident = launch_pipeline(device.backend, pipeline, memory)
    sequenced = [
        "#define PDC_IN_SEQUENCED 1\n" in stage.compiled.source for stage in resident.stages
    ]
    assert sequenced == [True, False, False]  # links carry no sequence words


def test_a_launch_that_fails_half_way_stops_the_stages_already_launched():
    device = Device(fail_launch_of="1")
    pipeline = abc()
    memory = device.host_region(pipeline)
    links_seen: list[Any] = []
    original = device.backend.to_device
    link_bytes = {pipeline.link_layout(index).total_size for index in (1, 2)}

    def to_device(host: Any, out: Any = None, stream: Any = None) -> Any:
        array = original(host, out, stream)
        if host.nbytes in link_bytes:  # a link's region, initialised
            links_seen.append(array)
        return array

    device.backend.to_device = to_device
    with pytest.raises(RuntimeError, match="cudaErrorLaunchOutOfResources"):
        launch_pipeline(device.backend, pipeline, memory)
    link1, link2 = (array.host for array in links_seen)
    # Stage 2 was launched and has no producer: it got STOP = NOW in its input region
    # (link 2, device memory); stage 1, whose launch raised, may have been queued: NOW too.
    assert link2[Offset.STOP : Offset.STOP + 4].view("<u4")[0] == StopMode.NOW
    assert link1[Offset.STOP : Offset.STOP + 4].view("<u4")[0] == StopMode.NOW
    assert memory.load32(Offset.STOP) == StopMode.RUN  # stage 0 never launched
    stage_streams = device.streams[:3]  # made while preparing stages 0, 1, 2 (then side streams)
    assert [stream.synchronized for stream in stage_streams] == [False, True, True]
    assert device.backend.resident_kernels() == []


def test_a_stage_that_does_not_compile_is_named_and_nothing_is_launched():
    device = Device()
    backend = device.backend
    compile_kernel = backend.compile_kernel

    def failing(source: str, name: str, options: Any = ()) -> Any:
        if _stage_of(source) == "1":
            raise CudaCompileError(name, "error: no member 'missing'", source, options)
        return compile_kernel(source, name, options)

    backend.compile_kernel = failing
    pipeline = abc()
    with pytest.raises(CudaCompileError) as caught:
        launch_pipeline(backend, pipeline, device.host_region(pipeline))
    assert "stage 1 ('b') of pipeline 'a->b->c' failed to compile" in str(caught.value)
    assert "no member 'missing'" in caught.value.log
    assert not any(event[0] == "launch" for event in device.log)
    assert backend.resident_kernels() == []


def test_the_error_in_the_host_region_names_the_stage_and_release_frees_the_links():
    device = Device()
    pipeline = PersistentPipeline(stage("a", ADD_ONE), stage("b", TWICE), stage("c", MINUS_THREE))
    memory = device.host_region(pipeline)
    resident = launch_pipeline(device.backend, pipeline, memory)
    message = b"stage 2 ('c'): the kernel body returned an error for request #5"
    memory.error_message_bytes[: len(message)] = np.frombuffer(message, np.uint8)
    memory.words32[Offset.ERROR_LENGTH >> 2] = len(message)
    memory.words32[Offset.ERROR_CODE >> 2] = 300
    error = resident.error
    assert error is not None
    assert (error.kernel, error.code) == ("c", 300)
    assert "in pipeline 'a->b->c'" in str(error)
    assert not resident.exited
    for stream in device.streams:
        stream.done = True
    assert resident.exited  # every stage's stream is done
    links = resident.links
    resident.release()
    assert all(link.device_array is None for link in links)
    assert device.backend.resident_kernels() == []


def test_release_after_a_fault_frees_the_links_without_raising():
    device = Device()
    pipeline = abc()
    resident = launch_pipeline(device.backend, pipeline, device.host_region(pipeline))
    for stream in device.streams:
        stream.done = True

    def faulted() -> None:
        raise RuntimeError("cudaErrorIllegalAddress: the context is gone")

    for link in resident.links:
        link.refresh = faulted  # type: ignore[method-assign]
    resident.release()
    assert all(link.device_array is None for link in resident.links)
