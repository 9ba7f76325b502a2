"""Body of PyDotCompute\'s :mod:`pdc_core.ring_kernels.telemetry`; see its docstring."""

from __future__ import annotations

import abc
import importlib
import math
import time
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from .._seed import Telemetry

__all__ = ["GPUInfo", "GPUMonitor", "RingKernelTelemetry", "TelemetryCollector"]


@dataclass
class RingKernelTelemetry(metaclass=abc.ABCMeta):  # noqa: B024 - for register()
    """PyDotCompute's ``RingKernelTelemetry``, a per-kernel recorder (see the module
    documentation): latencies in nanoseconds, ``min_latency_ns`` the least recorded (0
    before the first). Not ``pdc_core.RingKernelTelemetry``, which is pdc's other name
    for :class:`pdc_core.Telemetry`, the runtime's snapshot (an instance of this class
    by ``register``)."""

    kernel_id: str = ""
    messages_processed: int = 0
    messages_dropped: int = 0
    queue_depth: int = 0
    total_latency_ns: int = 0
    max_latency_ns: int = 0
    min_latency_ns: int = 0
    error_count: int = 0
    last_error: str | None = None
    uptime_seconds: float = 0.0

    def __repr__(self) -> str:
        # Says which API: pdc_core.RingKernelTelemetry is pdc's Telemetry snapshot.
        values = ", ".join(f"{field.name}={getattr(self, field.name)!r}" for field in fields(self))
        return f"PyDotCompute's RingKernelTelemetry({values})"

    @property
    def avg_latency_ns(self) -> float:
        """``total_latency_ns`` per processed message (0.0 before the first)."""
        if not self.messages_processed:
            return 0.0
        return self.total_latency_ns / self.messages_processed

    @property
    def avg_latency_ms(self) -> float:
        """:attr:`avg_latency_ns` in milliseconds."""
        return self.avg_latency_ns / 1e6

    @property
    def throughput(self) -> float:
        """Processed messages per second of ``uptime_seconds`` (0.0 without uptime)."""
        if self.uptime_seconds <= 0:
            return 0.0
        return self.messages_processed / self.uptime_seconds

    def record_message(self, latency_ns: int) -> None:
        """One message processed in ``latency_ns`` nanoseconds."""
        first = self.messages_processed == 0
        self.messages_processed += 1
        self.total_latency_ns += latency_ns
        self.max_latency_ns = latency_ns if first else max(self.max_latency_ns, latency_ns)
        self.min_latency_ns = latency_ns if first else min(self.min_latency_ns, latency_ns)

    def record_drop(self) -> None:
        """One message dropped."""
        self.messages_dropped += 1

    def record_error(self, error: str) -> None:
        """One error; ``error`` becomes ``last_error``."""
        self.error_count += 1
        self.last_error = error

    def reset(self) -> None:
        """Every count, latency and the uptime back to zero; the kernel id stays."""
        for name in _COUNTS:
            setattr(self, name, _COUNTS[name])

    def to_dict(self) -> dict[str, Any]:
        """The fields, ``avg_latency_ms`` and ``throughput`` as a plain dict."""
        data = asdict(self)
        data.update(avg_latency_ms=self.avg_latency_ms, throughput=self.throughput)
        return data


#: Every field but the kernel id, with its starting value (what ``reset`` restores).
_COUNTS: dict[str, Any] = {
    f.name: f.default for f in fields(RingKernelTelemetry) if f.name != "kernel_id"
}

# pdc's runtime reports snapshots; they answer every question the recorder does.
RingKernelTelemetry.register(Telemetry)


@dataclass
class GPUInfo:
    """One GPU as NVML reports it: memory in bytes, utilizations as fractions (0-1),
    temperature in degrees Celsius, power in watts."""

    index: int
    name: str
    uuid: str
    memory_total: int
    memory_used: int
    memory_free: int
    utilization_gpu: float
    utilization_memory: float
    temperature: float
    power_usage: float
    power_limit: float

    @property
    def memory_utilization(self) -> float:
        """``memory_used / memory_total`` (0.0 when the total is 0)."""
        return self.memory_used / self.memory_total if self.memory_total else 0.0


def _not_available(index: int) -> GPUInfo:
    """PyDotCompute's record of a GPU that cannot be read."""
    return GPUInfo(index, "N/A", "", 0, 0, 0, 0.0, 0.0, 0.0, 0.0, 0.0)


class GPUMonitor:
    """The GPUs NVML sees, read when asked (see the module documentation)."""

    def __init__(self) -> None:
        self._nvml: Any = None
        self._nvml_available = False
        self._device_count = 0
        try:
            nvml = importlib.import_module("pynvml")
            nvml.nvmlInit()
            self._device_count = int(nvml.nvmlDeviceGetCount())
        except Exception:  # no pynvml, no driver: no device to monitor
            return
        self._nvml = nvml
        self._nvml_available = True

    @property
    def is_available(self) -> bool:
        """Whether NVML is readable and sees at least one GPU."""
        return self._nvml_available and self._device_count > 0

    @property
    def device_count(self) -> int:
        """The GPUs NVML sees (0 without NVML)."""
        return self._device_count

    def get_gpu_info(self, device_index: int = 0) -> GPUInfo:
        """GPU ``device_index`` now; the ``"N/A"`` record without NVML. ``ValueError``
        for an index NVML does not have."""
        if not self._nvml_available:
            return _not_available(device_index)
        if not 0 <= device_index < self._device_count:
            raise ValueError(
                f"no GPU {device_index}: NVML sees {self._device_count} "
                f"(indices 0-{self._device_count - 1})"
            )
        nvml = self._nvml
        handle = nvml.nvmlDeviceGetHandleByIndex(device_index)

        def text(value: Any) -> str:
            return value.decode() if isinstance(value, bytes) else str(value)

        def watts(read: Any) -> float:
            try:
                return float(read(handle)) / 1000.0  # NVML reports milliwatts
            except nvml.NVMLError:  # not supported by this device
                return math.nan

        memory = nvml.nvmlDeviceGetMemoryInfo(handle)
        rates = nvml.nvmlDeviceGetUtilizationRates(handle)
        return GPUInfo(
            index=device_index,
            name=text(nvml.nvmlDeviceGetName(handle)),
            uuid=text(nvml.nvmlDeviceGetUUID(handle)),
            memory_total=int(memory.total),
            memory_used=int(memory.used),
            memory_free=int(memory.free),
            utilization_gpu=rates.gpu / 100.0,
            utilization_memory=rates.memory / 100.0,
            temperature=float(nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)),
            power_usage=watts(nvml.nvmlDeviceGetPowerUsage),
            power_limit=watts(nvml.nvmlDeviceGetPowerManagementLimit),
        )

    def get_all_gpu_info(self) -> list[GPUInfo]:
        """Every GPU now, by index."""
        return [self.get_gpu_info(index) for index in range(self._device_count)]

    def get_utilization(self, device_index: int = 0) -> float:
        """GPU ``device_index``'s utilization, a fraction (0.0 without NVML)."""
        return self.get_gpu_info(device_index).utilization_gpu

    def get_memory_info(self, device_index: int = 0) -> dict[str, int]:
        """GPU ``device_index``'s ``used``, ``free`` and ``total`` bytes."""
        info = self.get_gpu_info(device_index)
        return {"used": info.memory_used, "free": info.memory_free, "total": info.memory_total}

    def shutdown(self) -> None:
        """Let NVML go; the monitor reads nothing after this."""
        if self._nvml_available:
            self._nvml_available = False
            self._nvml.nvmlShutdown()

    def __del__(self) -> None:
        if getattr(self, "_nvml_available", False):
            self.shutdown()

    def __repr__(self) -> str:
        return f"GPUMonitor(available={self._nvml_available}, devices={self._device_count})"


@dataclass
class TelemetryCollector:
    """A :class:`RingKernelTelemetry` per kernel id, summed by :meth:`get_summary`;
    uptimes count from the collector's creation (or last :meth:`reset_all`)."""

    _kernel_telemetry: dict[str, RingKernelTelemetry] = field(default_factory=dict)
    _gpu_monitor: GPUMonitor = field(default_factory=GPUMonitor)
    _start_time: float = field(default_factory=time.monotonic)

    def register_kernel(self, kernel_id: str) -> RingKernelTelemetry:
        """The recorder of ``kernel_id``, made at the first call."""
        return self._kernel_telemetry.setdefault(kernel_id, RingKernelTelemetry(kernel_id))

    def unregister_kernel(self, kernel_id: str) -> None:
        """Forget ``kernel_id``'s recorder (nothing when there is none)."""
        self._kernel_telemetry.pop(kernel_id, None)

    def get_kernel_telemetry(self, kernel_id: str) -> RingKernelTelemetry | None:
        """``kernel_id``'s recorder, or ``None``."""
        return self._kernel_telemetry.get(kernel_id)

    def _uptime(self) -> float:
        return time.monotonic() - self._start_time

    def get_all_telemetry(self) -> dict[str, RingKernelTelemetry]:
        """Every recorder by kernel id, their ``uptime_seconds`` brought up to date."""
        uptime = self._uptime()
        for telemetry in self._kernel_telemetry.values():
            telemetry.uptime_seconds = uptime
        return dict(self._kernel_telemetry)

    def get_summary(self) -> dict[str, Any]:
        """Kernels, messages processed and dropped and errors in all, the uptime, and
        GPU 0's utilization (``None`` without a monitored GPU)."""
        recorders = self.get_all_telemetry().values()
        monitor = self._gpu_monitor
        return {
            "kernel_count": len(recorders),
            "total_messages_processed": sum(t.messages_processed for t in recorders),
            "total_messages_dropped": sum(t.messages_dropped for t in recorders),
            "total_errors": sum(t.error_count for t in recorders),
            "uptime_seconds": self._uptime(),
            "gpu_utilization": monitor.get_utilization() if monitor.is_available else None,
        }

    def reset_all(self) -> None:
        """Reset every recorder and restart the uptime."""
        for telemetry in self._kernel_telemetry.values():
            telemetry.reset()
        self._start_time = time.monotonic()
