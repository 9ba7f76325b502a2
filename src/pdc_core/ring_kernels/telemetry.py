"""PyDotCompute's import path ``pydotcompute.ring_kernels.telemetry``: kernel telemetry.

Thin layers for code written for PyDotCompute:

* :class:`RingKernelTelemetry` is PyDotCompute's mutable recorder: counts and latencies
  a program records itself (``record_message(latency_ns)``, ``record_drop()``,
  ``record_error(text)``). pdc's runtime keeps real counts without being asked:
  ``RingKernelRuntime.get_telemetry(kernel_id)`` returns a :class:`pdc_core.Telemetry`
  snapshot, which is a (read-only) ``RingKernelTelemetry`` here, so
  ``isinstance(runtime.get_telemetry(k), RingKernelTelemetry)`` holds and every
  attribute the recorder reads is there. Its ``throughput`` is per second of
  ``uptime_seconds``; a snapshot's is per second of active time. (``pdc_core``'s own
  ``RingKernelTelemetry`` stays its other name for ``Telemetry``.)
* :class:`TelemetryCollector` keeps a recorder per kernel id and sums them.
* :class:`GPUMonitor` reads the GPUs' utilization, memory, temperature and power from
  NVML through the optional ``pynvml`` module (``pip install nvidia-ml-py``), which pdc
  does not otherwise use; without NVML it reports no device, and
  :meth:`~GPUMonitor.get_gpu_info` the ``"N/A"`` record, as PyDotCompute's did. A
  reading the device does not support is ``nan``. pdc's own list of devices is a
  backend's ``devices()`` (``pdc info`` on the command line).
"""

from .._publish import publish
from .._pydotcompute.ring_kernels.telemetry import (
    GPUInfo,
    GPUMonitor,
    RingKernelTelemetry,
    TelemetryCollector,
)

__all__ = [
    "GPUInfo",
    "GPUMonitor",
    "RingKernelTelemetry",
    "TelemetryCollector",
]

publish(__name__, globals(), __all__)
