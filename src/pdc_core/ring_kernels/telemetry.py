"""PyDotCompute's import path ``pydotcompute.ring_kernels.telemetry``: kernel telemetry.

``RingKernelTelemetry`` is pdc's :class:`~pdc_core.Telemetry`. ``TelemetryCollector``
(use ``RingKernelRuntime.get_all_telemetry`` and ``get_summary``), ``GPUMonitor`` and
``GPUInfo`` (use ``Backend.devices()``, or ``pdc info``) are not provided.
"""

from .._seed import RingKernelTelemetry

__all__ = ["RingKernelTelemetry"]
