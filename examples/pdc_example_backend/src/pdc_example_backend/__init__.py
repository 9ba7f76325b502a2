"""An example third-party pdc backend: a *simulated discrete device*.

Its "device memory" is host memory kept apart from the arrays the host uses, so
every transfer is an explicit copy, exactly as on a discrete GPU. That makes it a
faithful, small model of how a real backend plugs in, and it lets pdc's own tests
exercise the host/device state machine of ``UnifiedBuffer`` without a GPU.

Install it with ``pip install ./examples/pdc_example_backend`` and select it with
``pdc_core.get_backend("example")``. The plugin-authoring guide walks through it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from pdc_core import Backend, Capability, DeviceInfo
from pdc_core.backend import (
    Availability,
    Event,
    MemoryKind,
    MemoryStatistics,
    Stream,
    hookimpl,
    normalize_shape_dtype,
)

__all__ = ["ExampleBackend", "DeviceArray", "pdc_register_backends"]


class DeviceArray:
    """Memory of the simulated device; not an ndarray, so it cannot pass for host memory."""

    def __init__(self, data: npt.NDArray[Any]) -> None:
        self._data = data

    @property
    def shape(self) -> tuple[int, ...]:
        return self._data.shape

    @property
    def dtype(self) -> np.dtype[Any]:
        return self._data.dtype

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype})"


class ImmediateStream(Stream):
    """A stream whose work runs at submission, so it is trivially in order."""

    def __init__(self, backend: ExampleBackend) -> None:
        self._backend = backend

    @property
    def backend(self) -> ExampleBackend:
        return self._backend

    @property
    def done(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def wait_event(self, event: Event) -> None:
        event.synchronize()


class ImmediateEvent(Event):
    def record(self, stream: Stream) -> None:
        pass

    @property
    def done(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass


class ExampleBackend(Backend):
    """A simulated discrete device with its own memory and explicit copies."""

    name: ClassVar[str] = "example"
    distribution: ClassVar[str] = "pdc-example-backend"
    priority: ClassVar[int] = -10  # never chosen by default over a real backend
    capabilities: ClassVar[frozenset[Capability]] = frozenset(
        {Capability.DEVICE_MEMORY, Capability.PINNED_MEMORY}
    )

    def __init__(self, device: int = 0) -> None:
        super().__init__(device)
        self.copies = {"to_device": 0, "to_host": 0}
        self._allocations = 0
        self._bytes = 0

    @classmethod
    def availability(cls) -> Availability:
        return Availability.yes("simulated device in host memory")

    @classmethod
    def devices(cls) -> list[DeviceInfo]:
        return [
            DeviceInfo(cls.name, index, f"simulated device {index}", "cpu", 1 << 30)
            for index in range(2)
        ]

    def allocate(
        self, shape: tuple[int, ...], dtype: np.dtype[Any], kind: MemoryKind = MemoryKind.DEVICE
    ) -> Any:
        shape, dtype = normalize_shape_dtype(shape, dtype)
        data = np.empty(shape, dtype)
        self._allocations += 1
        self._bytes += data.nbytes
        if MemoryKind(kind) in (MemoryKind.DEVICE, MemoryKind.MANAGED):
            return DeviceArray(data)
        return data

    def to_device(
        self, host: npt.NDArray[Any], out: Any = None, stream: Stream | None = None
    ) -> Any:
        self.copies["to_device"] += 1
        if out is None:
            return DeviceArray(np.array(host, copy=True))
        np.copyto(out._data, host)
        return out

    def to_host(
        self, device: Any, out: npt.NDArray[Any] | None = None, stream: Stream | None = None
    ) -> npt.NDArray[Any]:
        self.copies["to_host"] += 1
        if out is None:
            return np.array(device._data, copy=True)
        np.copyto(out, device._data)
        return out

    def memory_statistics(self) -> MemoryStatistics:
        return MemoryStatistics(misses=self._allocations, bytes_held=self._bytes)

    def create_stream(self) -> ImmediateStream:
        return ImmediateStream(self)

    def create_event(self) -> ImmediateEvent:
        return ImmediateEvent()

    def synchronize(self) -> None:
        pass


@hookimpl
def pdc_register_backends(register: Callable[[type[Backend]], None]) -> None:
    register(ExampleBackend)
