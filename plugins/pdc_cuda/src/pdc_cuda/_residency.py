"""Residency: which kernels are resident, and every driver call pdc makes beside them.

Nothing in pdc-cuda waits forever on a resident kernel. :data:`BESIDE_RESIDENT` lists
every place pdc-cuda may call into the CUDA driver while one of its kernels is
resident, with why that call cannot wait for the kernel -- one of :class:`Why`:

* ``OTHER_CONTEXT``: the call goes to a context where no pdc kernel runs (the default
  placement puts resident kernels in a context of pdc's own, :mod:`pdc_cuda._context`;
  module loads there go to a context where nothing runs).
* ``STREAM_ONLY``: it waits for one stream that no resident kernel uses, never for a
  context or the device.
* ``NO_WAIT``: it never waits (a query, an allocation, an asynchronous launch or copy).
  Allocations were measured returning beside a resident kernel (``cudaHostAlloc``
  2.9 ms, ``cudaMalloc`` 0.3 ms on an H200).
* ``DEFERRED``: the call would wait (``cudaFreeHost``, ``cudaFree``, ``cuMemFree``), so
  it is put off until no kernel is resident where it would wait.
* ``REFUSED_SHARED``: with a kernel resident in the primary context (placement
  ``"shared"``) the call would wait, so pdc raises :class:`ResidentKernelBlocks` at
  once, naming the resident kernels and the placement that avoids it.

A test keeps the list honest: each entry names a function that exists.

:class:`Residency` is the bookkeeping one backend keeps: the kernels launched and not
yet seen exited (strong references, so a kernel's memory outlives a dropped session),
memory whose free waits until none is resident, and the refusals of the shared
placement.
"""

from __future__ import annotations

import enum
import threading
from dataclasses import dataclass
from typing import Any, Protocol

from ._exceptions import ResidentKernelBlocks

__all__ = [
    "BESIDE_RESIDENT",
    "DriverCall",
    "Residency",
    "ResidentKernelBlocks",
    "ResidentLike",
    "Why",
]


class Why(enum.Enum):
    """Why a driver call made beside a resident kernel cannot wait for it."""

    OTHER_CONTEXT = "goes to a context where no pdc kernel runs"
    STREAM_ONLY = "waits for one stream no resident kernel uses"
    NO_WAIT = "never waits"
    DEFERRED = "would wait: put off until no kernel is resident"
    REFUSED_SHARED = "would wait in the shared placement: refused at once there"


@dataclass(frozen=True)
class DriverCall:
    """One place pdc-cuda may call the driver while a kernel is resident."""

    #: ``module:qualified.name`` of the function that makes the call.
    where: str
    #: The driver or CuPy call it makes.
    call: str
    #: Why it cannot wait for a resident kernel, per placement: (own/green, shared).
    why: tuple[Why, Why]
    note: str = ""


_OWN = Why.OTHER_CONTEXT
#: Every place pdc-cuda may reach the driver while a kernel is resident (see module docs).
BESIDE_RESIDENT: tuple[DriverCall, ...] = (
    DriverCall(
        "pdc_cuda._backend:CudaBackend.compile_kernel",
        "cupy.RawModule -> cuModuleLoadData (primary context)",
        (_OWN, Why.REFUSED_SHARED),
        "a cache hit loads nothing and is allowed in either placement",
    ),
    DriverCall(
        "pdc_cuda._backend:CudaBackend.run_python_kernel",
        "numba.cuda.jit -> module load (primary context)",
        (_OWN, Why.REFUSED_SHARED),
        "refused in the shared placement at a body's first compile",
    ),
    DriverCall(
        "pdc_cuda._backend:CudaBackend.launch_kernel",
        "cuLaunchKernel + wait for the launch's stream",
        (Why.STREAM_ONLY, Why.STREAM_ONLY),
    ),
    DriverCall(
        "pdc_cuda._backend:CudaBackend.free_cached_memory",
        "cudaFree / cudaFreeHost of CuPy's pools (primary context)",
        (_OWN, Why.REFUSED_SHARED),
    ),
    DriverCall(
        "pdc_cuda._backend:CudaBackend.synchronize",
        "cudaDeviceSynchronize (primary context) / stream synchronize",
        (_OWN, Why.STREAM_ONLY),
        "shared: every stream but the resident kernels' is synchronized instead",
    ),
    DriverCall(
        "pdc_cuda._backend:CudaBackend.allocate",
        "cudaMalloc / cudaHostAlloc",
        (Why.NO_WAIT, Why.NO_WAIT),
    ),
    DriverCall(
        "pdc_cuda._backend:CudaBackend.to_host",
        "cudaMemcpyAsync + wait for the copy's stream",
        (Why.STREAM_ONLY, Why.STREAM_ONLY),
    ),
    DriverCall(
        "pdc_cuda._backend:CudaBackend.to_device",
        "cudaMemcpyAsync + wait for the copy's stream",
        (Why.STREAM_ONLY, Why.STREAM_ONLY),
    ),
    DriverCall(
        "pdc_cuda._places:DriverPlace.compile",
        "cuModuleLoadData (a context pdc owns)",
        (_OWN, Why.REFUSED_SHARED),
        "loaded into a context where no kernel runs (ContextPool.context_for)",
    ),
    DriverCall(
        "pdc_cuda._context:PdcContext.copy",
        "cuStreamCreate + cuMemcpy*Async + cuStreamSynchronize on a side stream",
        (Why.STREAM_ONLY, Why.STREAM_ONLY),
        "read_state and device-memory links",
    ),
    DriverCall(
        "pdc_cuda._context:PdcContext.allocate",
        "cuMemAlloc (a context pdc owns)",
        (Why.NO_WAIT, Why.NO_WAIT),
    ),
    DriverCall(
        "pdc_cuda._context:PdcContext.free",
        "cuMemFree (a context pdc owns)",
        (Why.DEFERRED, Why.DEFERRED),
        "deferred while a kernel runs in that context",
    ),
    DriverCall(
        "pdc_cuda._persistent:CudaResidentKernel.exited",
        "cuStreamQuery / cudaStreamQuery",
        (Why.NO_WAIT, Why.NO_WAIT),
    ),
    DriverCall(
        "pdc_cuda._persistent:CudaResidentKernel.release",
        "cudaFreeHost of the rings, cuMemFree/cudaFree of the state",
        (Why.DEFERRED, Why.DEFERRED),
        "rings: Residency.defer_free until no kernel is resident; state: its context's "
        "PdcContext.free, deferred while a kernel runs there",
    ),
    DriverCall(
        "pdc_cuda._pipeline:launch_pipeline",
        "module loads of every stage, then the launches",
        (_OWN, Why.REFUSED_SHARED),
        "every stage is compiled and loaded before the first launch",
    ),
)


class ResidentLike(Protocol):
    """What :class:`Residency` needs of a resident kernel."""

    @property
    def exited(self) -> bool:
        """True once the kernel's stream is done (never blocks)."""

    @property
    def shares_primary(self) -> bool:
        """Whether the kernel runs in the primary context (placement ``"shared"``)."""

    @property
    def label(self) -> str:
        """The kernel's name, for messages."""


class Residency:
    """The resident kernels of one device, and what waits for them to be gone.

    Thread-safe. :meth:`running` is a pure query (it asks each kernel's stream, never
    blocks, changes nothing); :meth:`collect` is the one place that forgets exited
    kernels and lets deferred memory go.
    """

    def __init__(self, where: str) -> None:
        self.where = where
        # Both fields below are guarded by ``_lock``; no driver call is made under it.
        self._lock = threading.Lock()
        #: Kernels launched and not yet forgotten: added by register() (before the
        #: launch is queued); removed by forget() (a failed launch, a release) or by
        #: collect() once the kernel is exited. Strong references: a kernel's memory
        #: outlives a dropped session. May hold exited kernels until then.
        self._resident: set[Any] = set()
        #: The primary context's deferral queue: memory (ring allocations, CuPy
        #: arrays) whose free may wait for a resident kernel (cudaFreeHost,
        #: cudaFree). Appended by defer_free(); dropped by collect() once ``_resident``
        #: is empty. Memory of a context pdc owns never comes here: its context defers
        #: its own frees (``PdcContext.free``).
        self._deferred: list[Any] = []

    def register(self, kernel: ResidentLike) -> None:
        """Hold ``kernel`` (and through it its memory) until it is seen exited."""
        with self._lock:
            self._resident.add(kernel)

    def forget(self, kernel: ResidentLike) -> None:
        """Drop ``kernel`` (exited, or its launch failed)."""
        with self._lock:
            self._resident.discard(kernel)

    def running(self) -> list[Any]:
        """The kernels still running: a pure query (each kernel's stream is asked,
        never waited for; nothing is pruned or freed -- that is :meth:`collect`)."""
        with self._lock:
            candidates = list(self._resident)
        return [kernel for kernel in candidates if not kernel.exited]

    def collect(self) -> list[Any]:
        """Forget the kernels seen exited and, once none is resident, let the deferred
        memory go (its frees no longer wait); returns the kernels still running."""
        with self._lock:
            candidates = list(self._resident)
        alive = [kernel for kernel in candidates if not kernel.exited]
        with self._lock:
            self._resident.difference_update(set(candidates) - set(alive))
            released = self._deferred if not self._resident else []
            if not self._resident:
                self._deferred = []
        del released  # the last references: the memory is freed as they go
        return alive

    def defer_free(self, memory: Any) -> None:
        """Keep ``memory`` (primary-context memory, or a tuple of it) alive until no
        kernel is resident (its free would wait); see :meth:`collect`. Memory of a
        context pdc owns (it has ``free``) goes to that context's own queue instead."""
        free = getattr(memory, "free", None)
        if callable(free):
            free()  # PdcContext.free: made now, or deferred while a kernel runs there
            return
        with self._lock:
            self._deferred.append(memory)

    def refuse_module_load(self, name: str) -> None:
        """:meth:`refuse_beside_shared` for compiling and loading kernel ``name``."""
        self.refuse_beside_shared(f"compile and load kernel {name!r} (a module load)")

    def refuse_beside_shared(self, action: str) -> None:
        """Raise :class:`ResidentKernelBlocks` when a kernel is resident in the primary
        context: ``action`` would wait for it there."""
        shared = [kernel for kernel in self.running() if kernel.shares_primary]
        if shared:
            names = ", ".join(sorted(kernel.label for kernel in shared))
            raise ResidentKernelBlocks(
                f"cannot {action} on {self.where}: it would wait for the persistent kernel(s) "
                f"resident in the primary CUDA context ({names}), which never exit on their "
                "own. Stop them first, or launch resident kernels in a context of their own "
                "(context='own', the default; PDC_CUDA_CONTEXT=own)"
            )
