"""The example backend with one planted bug per class, for
tests/backend/test_conformance_mutations.py.

Importing this module needs ``pdc_example_backend`` importable (the
``example_backend_importable`` fixture). Its ``pdc_register_backends`` hook registers
every class below, each under its own name, so a test installs it as a plugin.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
from pdc_example_backend import DeviceArray, ExampleBackend

from pdc_core import Backend, Capability, PersistentKernel
from pdc_core.backend import (
    Event,
    HostWorkerKernel,
    MemoryKind,
    RingMemory,
    Stream,
    hookimpl,
    normalize_shape_dtype,
)

DISTRIBUTION = "pdc-conformance-mutants"


class Mutant(ExampleBackend):
    """The example backend, registered under another name."""

    distribution: ClassVar[str] = DISTRIBUTION
    #: The kit's checks this planted bug must fail (empty for a correct backend).
    caught_by: ClassVar[frozenset[str]] = frozenset()
    #: What the planted bug is, for messages.
    bug: ClassVar[str] = "none"

    def __init__(self, device: int = 0) -> None:
        super().__init__(device)
        self.release = threading.Event()  # set by the test: frees stuck calls

    def close(self) -> None:
        self.release.set()


class UnchangedExample(Mutant):
    name: ClassVar[str] = "mutant_none"


# -- (a) to_device shares the host's memory ----------------------------------------------


class SharedToDevice(Mutant):
    name: ClassVar[str] = "mutant_shared_to_device"
    bug = "to_device wraps the host array instead of copying it"
    caught_by = frozenset({"test_host_to_device_copies_are_copies"})

    def to_device(
        self, host: npt.NDArray[Any], out: Any = None, stream: Stream | None = None
    ) -> Any:
        if out is None:
            return DeviceArray(np.asarray(host))
        return super().to_device(host, out, stream)


# -- (b) to_host returns the device memory itself ----------------------------------------


class SharedToHost(Mutant):
    name: ClassVar[str] = "mutant_shared_to_host"
    bug = "to_host returns the device array's own memory"
    caught_by = frozenset({"test_device_to_host_copies_are_copies"})

    def to_host(
        self, device: Any, out: npt.NDArray[Any] | None = None, stream: Stream | None = None
    ) -> npt.NDArray[Any]:
        if out is None:
            data: npt.NDArray[Any] = device._data
            return data
        return super().to_host(device, out, stream)


# -- (c) allocate ignores dtype; (e) allocate ignores shape -------------------------------


class DtypeIgnored(Mutant):
    name: ClassVar[str] = "mutant_dtype_ignored"
    bug = "allocate ignores dtype (always float64)"
    caught_by = frozenset({"test_allocate_honours_shape_and_dtype"})

    def allocate(
        self, shape: tuple[int, ...], dtype: np.dtype[Any], kind: MemoryKind = MemoryKind.DEVICE
    ) -> Any:
        shape, _ = normalize_shape_dtype(shape, dtype)
        return super().allocate(shape, np.dtype(np.float64), kind)


class ShapeIgnored(Mutant):
    name: ClassVar[str] = "mutant_shape_ignored"
    bug = "allocate returns flat device memory whatever the shape"
    caught_by = frozenset({"test_allocate_honours_shape_and_dtype"})

    def allocate(
        self, shape: tuple[int, ...], dtype: np.dtype[Any], kind: MemoryKind = MemoryKind.DEVICE
    ) -> Any:
        shape, dtype = normalize_shape_dtype(shape, dtype)
        if MemoryKind(kind) is MemoryKind.DEVICE:
            return DeviceArray(np.empty(int(np.prod(shape)), dtype))
        return super().allocate(shape, dtype, kind)


# -- (d) an event that never completes ---------------------------------------------------


class NeverEvent(Event):
    """Never done; ``synchronize`` blocks until the test releases it."""

    def __init__(self, release: threading.Event) -> None:
        self._release = release

    def record(self, stream: Stream) -> None:
        pass

    @property
    def done(self) -> bool:
        return False

    def synchronize(self) -> None:
        self._release.wait()


class StuckEvent(Mutant):
    name: ClassVar[str] = "mutant_stuck_event"
    bug = "an event recorded on a stream never completes"
    caught_by = frozenset(
        {
            "test_stream_copies_complete_in_order",
            "test_recorded_event_completes",
            "test_wait_event_across_streams",
            "test_async_waits",
        }
    )

    def create_event(self) -> NeverEvent:  # type: ignore[override]
        return NeverEvent(self.release)


# -- (f) a stream that runs its work out of order ----------------------------------------


class LastInFirstOutStream(Stream):
    """Queues work and runs it newest first when synchronized."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self.work: list[Callable[[], None]] = []

    @property
    def backend(self) -> Backend:
        return self._backend

    @property
    def done(self) -> bool:
        return not self.work

    def synchronize(self) -> None:
        while self.work:
            self.work.pop()()

    def wait_event(self, event: Event) -> None:
        event.synchronize()


class StreamEvent(Event):
    def __init__(self) -> None:
        self._stream: LastInFirstOutStream | None = None

    def record(self, stream: Stream) -> None:
        assert isinstance(stream, LastInFirstOutStream)
        self._stream = stream

    @property
    def done(self) -> bool:
        return self._stream is None or self._stream.done

    def synchronize(self) -> None:
        if self._stream is not None:
            self._stream.synchronize()


class ReorderingStream(Mutant):
    name: ClassVar[str] = "mutant_reordering_stream"
    bug = "a stream runs its queued copies newest first"
    caught_by = frozenset(
        {"test_stream_copies_complete_in_order", "test_stream_runs_work_in_submission_order"}
    )

    def to_device(
        self, host: npt.NDArray[Any], out: Any = None, stream: Stream | None = None
    ) -> Any:
        if stream is None:
            return super().to_device(host, out)
        assert isinstance(stream, LastInFirstOutStream)
        target = out if out is not None else DeviceArray(np.empty(host.shape, host.dtype))
        stream.work.append(lambda: np.copyto(target._data, host))
        return target

    def to_host(
        self, device: Any, out: npt.NDArray[Any] | None = None, stream: Stream | None = None
    ) -> npt.NDArray[Any]:
        if stream is None:
            return super().to_host(device, out)
        assert isinstance(stream, LastInFirstOutStream)
        target = out if out is not None else np.empty(device.shape, device.dtype)
        stream.work.append(lambda: np.copyto(target, device._data))
        return target

    def create_stream(self) -> LastInFirstOutStream:  # type: ignore[override]
        return LastInFirstOutStream(self)

    def create_event(self) -> StreamEvent:  # type: ignore[override]
        return StreamEvent()


# -- persistent kernels: a correct one, and one that loses the error word -----------------


class ExampleWorkerKernel(HostWorkerKernel):
    """The shared host worker, its state kept in the example's DEVICE memory (a
    ``DeviceArray``, not an ndarray): the hooks a wrapper-memory backend overrides."""

    def make_state(self, initial: npt.NDArray[Any]) -> Any:
        return self.backend.to_device(initial)

    def state_to_host(self, state: Any) -> npt.NDArray[Any]:
        return self.backend.to_host(state)

    def call_body(self, requests: npt.NDArray[Any]) -> Any:
        if self.state is None:
            return self.body(requests)
        return self.body(requests, self.state._data)  # the simulated device's memory


class PersistentExample(Mutant):
    """The example backend with persistent kernels (the shared host worker): correct."""

    name: ClassVar[str] = "mutant_persistent_ok"
    capabilities: ClassVar[frozenset[Capability]] = ExampleBackend.capabilities | {
        Capability.PERSISTENT_KERNELS
    }
    resident_type: ClassVar[type[HostWorkerKernel]] = ExampleWorkerKernel

    def launch_persistent_kernel(
        self, kernel: PersistentKernel, rings: RingMemory, **options: Any
    ) -> HostWorkerKernel:
        return self.resident_type.launch(self, kernel, rings, **options)


class DefaultStateHooks(PersistentExample):
    name: ClassVar[str] = "mutant_default_state_hooks"
    bug = "the host worker's default make_state/state_to_host on wrapper DEVICE memory"
    resident_type = HostWorkerKernel
    caught_by = frozenset({"test_persistent_kernel_state"})


class ForgivingKernel(ExampleWorkerKernel):
    """Swallows the body's exceptions and answers zeros: the error word is never set."""

    def call_body(self, requests: npt.NDArray[Any]) -> Any:
        try:
            return super().call_body(requests)
        except Exception:
            return np.zeros(len(requests), self.kernel.reply_dtype)


class LostErrorWord(PersistentExample):
    name: ClassVar[str] = "mutant_lost_error_word"
    bug = "the resident kernel swallows body errors instead of setting the error word"
    resident_type = ForgivingKernel
    caught_by = frozenset({"test_persistent_kernel_error_word"})


MUTANTS: tuple[type[Mutant], ...] = (
    SharedToDevice,
    SharedToHost,
    DtypeIgnored,
    ShapeIgnored,
    StuckEvent,
    ReorderingStream,
    LostErrorWord,
    DefaultStateHooks,
)
CORRECT: tuple[type[Mutant], ...] = (UnchangedExample, PersistentExample)


@hookimpl
def pdc_register_backends(register: Callable[[type[Backend]], None]) -> None:
    for cls in (*CORRECT, *MUTANTS):
        register(cls)
