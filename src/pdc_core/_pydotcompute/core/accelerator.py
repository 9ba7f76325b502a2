"""Body of PyDotCompute\'s :mod:`pdc_core.core.accelerator`; see its docstring."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from pdc_core import available_backends, get_backend
from pdc_core.backend import Backend, DeviceInfo

from ..backends.base import BackendType

__all__ = [
    "Accelerator",
    "DeviceProperties",
    "DeviceType",
    "cuda_available",
    "get_accelerator",
    "metal_available",
]


#: PyDotCompute's name of the kind of a device: the backend that drives it.
DeviceType = BackendType


@dataclass(frozen=True)
class DeviceProperties:
    """PyDotCompute's description of a device (pdc's is :class:`~pdc_core.DeviceInfo`)."""

    device_id: int
    device_type: DeviceType
    name: str
    compute_capability: tuple[int, int] | None
    total_memory: int
    multiprocessor_count: int
    max_threads_per_block: int
    max_block_dims: tuple[int, int, int]
    max_grid_dims: tuple[int, int, int]
    warp_size: int
    is_available: bool

    @property
    def compute_capability_str(self) -> str:
        """``"8.9"``, or ``"N/A"`` for a device without a compute capability."""
        if self.compute_capability is None:
            return "N/A"
        return f"{self.compute_capability[0]}.{self.compute_capability[1]}"

    @property
    def total_memory_gb(self) -> float:
        """``total_memory`` in GiB."""
        return self.total_memory / (1024**3)

    @classmethod
    def from_device_info(cls, device_id: int, info: DeviceInfo) -> DeviceProperties:
        """The properties of pdc's ``info``, numbered ``device_id`` in the accelerator."""
        props: Mapping[str, Any] = info.properties

        def dims(key: str, default: tuple[int, int, int]) -> tuple[int, int, int]:
            value = props.get(key)
            return (int(value[0]), int(value[1]), int(value[2])) if value else default

        gpu = info.kind == "gpu"
        capability = props.get("compute_capability")
        return cls(
            device_id=device_id,
            device_type=DeviceType(info.backend) if info.backend in _TYPES else DeviceType.CPU,
            name=info.name,
            compute_capability=tuple(capability) if capability else None,
            total_memory=info.total_memory or 0,
            multiprocessor_count=int(props.get("multiProcessorCount", 1)),
            max_threads_per_block=int(props.get("maxThreadsPerBlock", 1024 if gpu else 1)),
            max_block_dims=dims("maxThreadsDim", (1024, 1024, 64) if gpu else (1, 1, 1)),
            max_grid_dims=dims("maxGridSize", (2**31 - 1, 65535, 65535) if gpu else (1, 1, 1)),
            warp_size=int(props.get("warpSize", 32 if gpu else 1)),
            is_available=True,
        )


_TYPES = {member.value for member in DeviceType}


class Accelerator:
    """The devices pdc's backends report, one object per process (as in PyDotCompute)."""

    _instance: ClassVar[Accelerator | None] = None
    _initialized: ClassVar[bool] = False

    def __new__(cls) -> Accelerator:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __init__(self) -> None:
        if Accelerator._initialized:
            return
        gpus: list[DeviceInfo] = []
        for info in available_backends():  # best first: CUDA before Metal
            if info.availability.available and info.name in _TYPES:
                gpus += [d for d in type(get_backend(info.name)).devices() if d.kind == "gpu"]
        found = gpus or get_backend("cpu").devices()
        self._devices = [DeviceProperties.from_device_info(i, d) for i, d in enumerate(found)]
        self._backends = [device.qualified_name for device in found]  # "cuda:1"
        self._current_device_id = 0
        Accelerator._initialized = True

    @property
    def cuda_available(self) -> bool:
        """Whether a CUDA device is in the list."""
        return any(d.device_type is DeviceType.CUDA for d in self._devices)

    @property
    def metal_available(self) -> bool:
        """Whether a Metal GPU is in the list."""
        return any(d.device_type is DeviceType.METAL for d in self._devices)

    @property
    def device_count(self) -> int:
        """The number of devices."""
        return len(self._devices)

    @property
    def current_device(self) -> DeviceProperties:
        """The device :meth:`set_device` chose (the first one at first)."""
        return self._devices[self._current_device_id]

    @property
    def devices(self) -> list[DeviceProperties]:
        """A copy of the list of devices."""
        return list(self._devices)

    def _check(self, device_id: int) -> int:
        if not 0 <= device_id < len(self._devices):
            raise ValueError(
                f"Invalid device_id: {device_id}. Valid range: 0-{len(self._devices) - 1}"
            )
        return device_id

    def get_device(self, device_id: int) -> DeviceProperties:
        """The properties of device ``device_id``; ``ValueError`` when out of range."""
        return self._devices[self._check(device_id)]

    def set_device(self, device_id: int) -> None:
        """Make device ``device_id`` the current one; ``ValueError`` when out of range."""
        self._current_device_id = self._check(device_id)

    def _backend(self) -> Backend:
        """pdc's backend of the current device."""
        return get_backend(self._backends[self._current_device_id])

    def synchronize(self) -> None:
        """Wait for the current device's queued work (its backend's ``synchronize``)."""
        self._backend().synchronize()

    def get_memory_info(self) -> dict[str, int]:
        """``free``, ``total`` and ``used`` bytes of the current device's memory pool."""
        stats = self._backend().memory_statistics()
        total = stats.limit or 0
        return {
            "free": max(total - stats.bytes_in_use, 0),
            "total": total,
            "used": stats.bytes_in_use,
        }

    def __repr__(self) -> str:
        return (
            f"Accelerator(devices={self.device_count}, cuda_available={self.cuda_available}, "
            f"metal_available={self.metal_available}, current_device={self.current_device.name})"
        )


def get_accelerator() -> Accelerator:
    """The process's :class:`Accelerator`."""
    return Accelerator()


def cuda_available() -> bool:
    """Whether pdc has a CUDA device here."""
    return get_accelerator().cuda_available


def metal_available() -> bool:
    """Whether pdc has a Metal GPU here."""
    return get_accelerator().metal_available
