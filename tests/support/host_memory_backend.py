"""A backend whose memory is plain NumPy host memory and that does nothing else: the base
of the tests' fake backends, which add what they test (a scripted persistent kernel, a
launch that refuses links, ...)."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from pdc_core import Backend, DeviceInfo
from pdc_core.backend import Availability, MemoryKind, MemoryStatistics


class HostMemoryBackend(Backend):
    """Available everywhere, one device; arrays are NumPy arrays (zeroed); no streams,
    events or kernels unless a subclass declares and implements them."""

    name: ClassVar[str] = "hostmemory"
    distribution: ClassVar[str] = "none"

    @classmethod
    def availability(cls) -> Availability:
        return Availability.yes()

    @classmethod
    def devices(cls) -> list[DeviceInfo]:
        return [DeviceInfo(backend=cls.name, index=0, name="host", kind="cpu")]

    def allocate(
        self, shape: tuple[int, ...], dtype: np.dtype[Any], kind: MemoryKind = MemoryKind.DEVICE
    ) -> Any:
        return np.zeros(shape, dtype)

    def to_device(self, host: Any, out: Any = None, stream: Any = None) -> Any:
        return np.array(host)

    def to_host(self, device: Any, out: Any = None, stream: Any = None) -> Any:
        return np.array(device)

    def memory_statistics(self) -> MemoryStatistics:
        return MemoryStatistics()

    def create_stream(self) -> Any:
        raise NotImplementedError

    def create_event(self) -> Any:
        raise NotImplementedError

    def synchronize(self) -> None:
        pass
