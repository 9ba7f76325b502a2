"""The ring protocol of kernel-to-kernel links, driven step by step without threads.

A 3-stage pipeline is built from the pure-Python endpoints (``RingHost`` for the host,
``LinkedDevice`` for each stage) on real ring regions; hypothesis picks the order of
host writes, host reads and stage steps, and the capacities. Whatever the
interleaving, every record must come out exactly once, in order, having gone through
every stage, and a drain stop must finish stage by stage with nothing left behind.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.host_memory_backend import HostMemoryBackend

from pdc_core import Backend, CapabilityError, PersistentKernel, PersistentPipeline
from pdc_core.backend import (
    Capability,
    LinkedDevice,
    Offset,
    ResidentKernel,
    RingHost,
    RingMemory,
    StageLink,
    StopMode,
    launch_pipeline,
)

REC = np.dtype([("id", "<u8"), ("hops", "<u4")], align=True)


class Bell:
    """A doorbell that only counts its rings (no thread sleeps in this test)."""

    def __init__(self) -> None:
        self.rings = 0

    def wake(self) -> None:
        self.rings += 1


class Pipeline3:
    """Three linked stages and the host, all stepped by the test."""

    def __init__(self, capacities: tuple[int, int, int]) -> None:
        stages = [
            PersistentKernel(name, REC, REC, capacity=cap)
            for name, cap in zip("abc", capacities, strict=True)
        ]
        self.pipeline = PersistentPipeline(*stages)
        host_region = RingMemory.from_buffer(self.pipeline.kernel.layout)
        self.regions = [host_region] + [
            RingMemory.from_buffer(self.pipeline.link_layout(index)) for index in (1, 2)
        ]
        self.bells = [Bell() for _ in range(3)]
        self.links = []
        for index in range(3):
            output = self.regions[index + 1] if index < 2 else host_region
            link = StageLink(self.pipeline, index, host_region, output)
            link.consumer = self.bells[index + 1] if index < 2 else None  # type: ignore[assignment]
            link.producer = self.bells[index - 1] if index else None  # type: ignore[assignment]
            self.links.append(link)
        self.devices = [
            LinkedDevice(self.regions[index], self.links[index], self._waiter(index))
            for index in range(3)
        ]
        self.host = RingHost(host_region)
        self.received: list[npt.NDArray[Any]] = []
        self.done = [False] * 3
        for device in reversed(self.devices):  # as launched: the last stage first
            device.check_header()
            device.mark_started()
        assert self.host.started

    def _waiter(self, index: int) -> Callable[[Callable[[], bool]], None]:
        """A stage waiting for its consumer: run the consumer (and read replies) until
        the condition holds, as the other threads would."""

        def wait_until(condition: Callable[[], bool]) -> None:
            for _ in range(10_000):
                if condition():
                    return
                self.read()
                for later in range(index + 1, 3):
                    self.run_to_end(later)
            raise AssertionError(f"stage {index} waited forever")

        return wait_until

    def write(self, records: npt.NDArray[Any]) -> int:
        return self.host.write(records)

    def read(self) -> None:
        replies = self.host.read()
        if len(replies):
            self.received.append(replies)

    def step(self, index: int, limit: int | None) -> int:
        """One pass of stage ``index``'s loop body: take a run, add a hop, publish."""
        device = self.devices[index]
        first, count = device.next_batch(limit)
        if count:
            requests = device.inputs(first, count)
            replies = device.outputs(first, count)
            replies["id"] = requests["id"]
            replies["hops"] = requests["hops"] + 1
            device.publish(count)
        return count

    def run_to_end(self, index: int) -> None:
        """Stage ``index``'s loop until it leaves (by its stop word), then ``DONE``."""
        device = self.devices[index]
        if self.done[index]:
            return
        for _ in range(10_000):
            mode = device.stop_mode()
            if mode is StopMode.NOW:
                break
            if self.step(index, None) == 0:
                if mode is StopMode.DRAIN and device.drained():
                    break
                return  # nothing to do yet: a waiting producer steps it again
        else:
            raise AssertionError(f"stage {index} never finished")
        self.done[index] = True
        device.mark_done()

    def all_received(self) -> npt.NDArray[Any]:
        return np.concatenate(self.received) if self.received else np.empty(0, REC)


actions = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.integers(1, 7)),
        st.tuples(st.just("read"), st.just(0)),
        st.tuples(st.sampled_from(["step0", "step1", "step2"]), st.integers(0, 5)),
    ),
    max_size=80,
)


@settings(max_examples=100, deadline=None)
@given(
    capacities=st.tuples(st.integers(1, 4), st.integers(1, 4), st.integers(1, 4)),
    script=actions,
    total=st.integers(0, 40),
)
def test_every_record_goes_through_every_stage_once_in_order(
    capacities: tuple[int, int, int], script: list[tuple[str, int]], total: int
) -> None:
    pipe = Pipeline3(capacities)
    source = np.zeros(total, REC)
    source["id"] = np.arange(total)
    sent = 0
    for action, value in script:
        if action == "write":
            sent += pipe.write(source[sent : min(total, sent + value)])
        elif action == "read":
            pipe.read()
        else:
            pipe.step(int(action[-1]), value or None)
        got = pipe.all_received()
        # Nothing is ever ahead of what was sent, and what came out is a prefix.
        assert got["id"].tolist() == list(range(len(got)))
        assert len(got) <= sent
        # Links never hold more than their capacity.
        for index in (1, 2):
            words = pipe.regions[index].words64
            in_flight = int(words[Offset.IN_HEAD >> 3]) - int(words[Offset.IN_TAIL >> 3])
            assert 0 <= in_flight <= capacities[index]
    # The rest of the traffic, then a drain stop that must go stage by stage.
    while sent < total:
        sent += pipe.write(source[sent:])
        for index in range(3):
            pipe.step(index, None)
        pipe.read()
    pipe.host.request_stop(StopMode.DRAIN)
    while not pipe.done[0]:  # stage 0's DONE waits for stage 1's, which waits for 2's
        pipe.run_to_end(0)
        for index in (1, 2):
            pipe.step(index, None)
        pipe.read()
    pipe.read()
    assert pipe.done == [True, True, True]
    assert pipe.host.done
    assert all(region.load32(Offset.DONE) for region in pipe.regions)
    assert all(region.load32(Offset.ERROR_CODE) == 0 for region in pipe.regions)
    got = pipe.all_received()
    assert got["id"].tolist() == list(range(total))
    assert (got["hops"] == 3).all()
    # Each link carried every record once: its heads all equal the count.
    for index in (1, 2):
        words = pipe.regions[index].words64
        assert int(words[Offset.IN_HEAD >> 3]) == int(words[Offset.IN_TAIL >> 3]) == total


@pytest.mark.parametrize("failing", [0, 1, 2])
def test_a_stage_error_reaches_the_host_region_naming_the_stage(failing: int) -> None:
    pipe = Pipeline3((2, 2, 2))
    pipe.write(np.zeros(2, REC))
    for index in range(failing):
        pipe.step(index, None)
    pipe.devices[failing].set_error(1, "the body raised ValueError: boom")
    pipe.done[failing] = True
    pipe.devices[failing].mark_done()  # stops its consumer first
    for index in reversed(range(failing)):  # its producers see a broken link
        assert pipe.devices[index].stop_mode() is StopMode.NOW
        pipe.run_to_end(index)
    assert pipe.host.done
    message = pipe.regions[0].error_message()
    assert message.startswith(f"stage {failing} ('{'abc'[failing]}'): ")
    assert pipe.regions[0].load32(Offset.ERROR_CODE) == 1
    assert all(region.load32(Offset.DONE) for region in pipe.regions)


def test_stop_now_passes_down_and_done_comes_back_up() -> None:
    pipe = Pipeline3((3, 3, 3))
    pipe.write(np.zeros(3, REC))
    pipe.step(0, None)
    pipe.host.request_stop(StopMode.NOW)
    pipe.run_to_end(0)
    assert pipe.done == [True, True, True]
    assert [region.load32(Offset.STOP) for region in pipe.regions] == [1, 1, 1]
    assert pipe.all_received().size == 0 or pipe.host.done


# -- backends that cannot run a pipeline ---------------------------------------------------


class _HostMemoryBackend(HostMemoryBackend):
    """Host memory for rings; persistent kernels only as its subclasses say."""

    name: ClassVar[str] = "nolinks"


class _KernelsWithoutLinks(_HostMemoryBackend):
    """Runs persistent kernels but knows no launch option (``link`` included)."""

    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.PERSISTENT_KERNELS})

    def launch_persistent_kernel(
        self, kernel: PersistentKernel, rings: RingMemory, **options: Any
    ) -> ResidentKernel:
        if options:
            raise TypeError(f"unknown launch option(s) {', '.join(sorted(options))}")
        raise AssertionError("a stage of a pipeline is always launched with link=")


def _launch_on(backend: Backend) -> None:
    pipeline = Pipeline3((2, 2, 2)).pipeline
    launch_pipeline(backend, pipeline, RingMemory.from_buffer(pipeline.kernel.layout))


def test_a_backend_that_does_not_take_links_cannot_run_a_pipeline() -> None:
    with pytest.raises(CapabilityError, match="the nolinks backend cannot link persistent"):
        _launch_on(_KernelsWithoutLinks())


def test_whether_a_backend_links_pipelines_is_its_capability_not_an_error_text() -> None:
    """Without ``Capability.PIPELINES`` nothing is allocated or launched; with it, a
    ``TypeError`` of a stage's launch is the launch's error, whatever its text."""
    allocated: list[object] = []

    class Counting(_KernelsWithoutLinks):
        def allocate(self, *args: Any, **kwargs: Any) -> Any:
            allocated.append(args)
            return super().allocate(*args, **kwargs)

    with pytest.raises(CapabilityError, match="it has no pipelines capability"):
        _launch_on(Counting())
    assert allocated == []

    class Linking(Counting):
        capabilities: ClassVar[frozenset[Capability]] = frozenset(
            {Capability.PERSISTENT_KERNELS, Capability.PIPELINES}
        )

        def launch_persistent_kernel(
            self, kernel: PersistentKernel, rings: RingMemory, **options: Any
        ) -> ResidentKernel:
            raise TypeError("a bad link word in this stage's body")

    with pytest.raises(TypeError, match="a bad link word"):
        _launch_on(Linking())


def test_a_backend_without_persistent_kernels_cannot_run_a_pipeline() -> None:
    with pytest.raises(CapabilityError, match="no persistent_kernels capability"):
        _launch_on(_HostMemoryBackend())


def test_a_backend_launching_pipelines_itself_must_return_their_resident() -> None:
    calls: list[tuple[Any, ...]] = []

    class OwnLaunch(_KernelsWithoutLinks):
        capabilities: ClassVar[frozenset[Capability]] = frozenset(
            {Capability.PERSISTENT_KERNELS, Capability.PIPELINES}
        )

        def launch_pipeline(self, pipeline: Any, memory: Any, **options: Any) -> Any:
            calls.append((pipeline, memory, options))
            return object()

    with pytest.raises(TypeError, match="returned object, not a PipelineResident"):
        _launch_on(OwnLaunch())
    ((pipeline, memory, options),) = calls
    assert isinstance(pipeline, PersistentPipeline)
    assert memory.layout == pipeline.kernel.layout
    assert options == {}
