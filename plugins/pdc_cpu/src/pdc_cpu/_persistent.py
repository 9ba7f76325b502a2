"""The CPU backend's persistent kernel: a worker thread running the ring protocol.

The worker is :class:`pdc_core.backend.HostWorkerKernel` (shared by every host backend) in its
default configuration: it calls the kernel's ``cpu`` body once per contiguous run of
requests with a read-only NumPy record array, and expects a record array of replies;
device-resident state is a NumPy array the body updates in place. The worker sleeps
on a doorbell and the host sleeps in its selector, so neither burns the GIL; see
:class:`pdc_core.backend.HostWorkerKernel` for the measured cost of spinning instead.
"""

from __future__ import annotations

from typing import Any

from pdc_core import Backend
from pdc_core.backend import HostWorkerKernel, PersistentKernelSpec, RingMemory

__all__ = ["CpuResidentKernel", "launch"]


class CpuResidentKernel(HostWorkerKernel):
    """A persistent kernel resident in a worker thread of the CPU backend.

    Launch options (``open_persistent_kernel(kernel, "cpu", **options)``): those of
    :class:`~pdc_core.backend.HostWorkerKernel` -- ``worker_wait`` (``"doorbell"`` or, for
    measurement only, ``"spin"``), ``host_wait`` (``"notify"`` or, for measurement
    only, ``"poll"``) and ``idle_timeout`` (seconds).

    The body is ``body(requests) -> replies`` (``body(requests, state)`` with state)
    over NumPy record arrays; the device-resident state is a NumPy array the body
    receives as its second argument and may update in place.
    """

    body_backend = "cpu"


def launch(
    backend: Backend, kernel: PersistentKernelSpec, rings: RingMemory, **options: Any
) -> HostWorkerKernel:
    """``CpuBackend.launch_persistent_kernel``: start the worker thread."""
    return CpuResidentKernel.launch(backend, kernel, rings, **options)
