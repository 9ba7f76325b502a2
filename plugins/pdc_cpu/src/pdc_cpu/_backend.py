"""The CPU backend: the host is the device."""

from __future__ import annotations

import os
import platform
import weakref
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from pdc_core import Backend, Capability, DeviceInfo
from pdc_core.backend import (
    Availability,
    MemoryKind,
    MemoryStatistics,
    PersistentKernelSpec,
    ResidentKernel,
    RingMemory,
    Stream,
    normalize_shape_dtype,
)

from ._memory import HostMemoryPool
from ._streams import CpuEvent, CpuStream


def _processor_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "host CPU"


def _total_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


class CpuBackend(Backend):
    """Runs everything on the host with NumPy.

    Memory of every kind (device, pinned, mapped, managed) is ordinary host memory,
    and the backend declares :attr:`~pdc_core.Capability.UNIFIED_MEMORY` rather than
    pretending otherwise: a device view of a host array is the array itself. Copies
    are real copies (``to_device`` returns new memory), and with a stream they run on
    that stream's worker thread, in order.

    Memory comes from a caching pool: a block whose last view is gone is kept for reuse
    by a later allocation it can serve (of its size, or of up to half of it: best fit),
    up to :attr:`cache_limit` bytes of such blocks and :attr:`cache_ratio` times the
    peak of bytes in use (least recently freed ones are released first).
    ``memory_statistics()`` reports it: the cached bytes are ``bytes_held -
    bytes_in_use``.
    """

    name: ClassVar[str] = "cpu"
    distribution: ClassVar[str] = "pdc-cpu"
    priority: ClassVar[int] = 0
    capabilities: ClassVar[frozenset[Capability]] = frozenset(
        {
            Capability.UNIFIED_MEMORY,
            Capability.ASYNC_COPIES,
            Capability.PERSISTENT_KERNELS,
            Capability.PIPELINES,
            Capability.PYTHON_KERNELS,
        }
    )

    def __init__(self, device: int = 0) -> None:
        super().__init__(device)
        self.pool = HostMemoryPool()
        self._streams: weakref.WeakSet[CpuStream] = weakref.WeakSet()

    @classmethod
    def availability(cls) -> Availability:
        return Availability.yes("NumPy on the host")

    @classmethod
    def devices(cls) -> list[DeviceInfo]:
        return [
            DeviceInfo(
                backend=cls.name,
                index=0,
                name=_processor_name(),
                kind="cpu",
                total_memory=_total_memory(),
                properties={
                    "cores": os.cpu_count(),
                    "machine": platform.machine(),
                    "numpy": np.__version__,
                    "memory": "host (device, pinned and unified memory are all host memory)",
                },
            )
        ]

    def allocate(
        self, shape: tuple[int, ...], dtype: np.dtype[Any], kind: MemoryKind = MemoryKind.DEVICE
    ) -> npt.NDArray[Any]:
        shape, dtype = normalize_shape_dtype(shape, dtype)
        MemoryKind(kind)  # reject unknown kinds with a ValueError naming them
        return self.pool.allocate(shape, dtype)

    def to_device(
        self, host: npt.NDArray[Any], out: Any = None, stream: Stream | None = None
    ) -> npt.NDArray[Any]:
        return self._copy(np.asarray(host), out, stream)

    def to_host(
        self, device: Any, out: npt.NDArray[Any] | None = None, stream: Stream | None = None
    ) -> npt.NDArray[Any]:
        return self._copy(np.asarray(device), out, stream)

    def _copy(
        self, src: npt.NDArray[Any], out: npt.NDArray[Any] | None, stream: Stream | None
    ) -> npt.NDArray[Any]:
        if out is None:
            out = self.pool.allocate(src.shape, src.dtype)
        elif out.shape != src.shape or out.dtype != src.dtype:
            raise ValueError(
                f"cannot copy an array of shape {src.shape} and dtype {src.dtype} into one "
                f"of shape {out.shape} and dtype {out.dtype}"
            )
        if stream is None:
            np.copyto(out, src)
        else:
            if not isinstance(stream, CpuStream):
                raise TypeError(f"the cpu backend needs a cpu stream, not {stream!r}")
            target = out
            stream.submit(lambda: np.copyto(target, src))
        return out

    def device_view(self, host: npt.NDArray[Any]) -> npt.NDArray[Any]:
        return host

    def memory_statistics(self) -> MemoryStatistics:
        return self.pool.statistics()

    def free_cached_memory(self) -> None:
        self.pool.free_cached()

    @property
    def cache_limit(self) -> int | None:
        """The most bytes of freed host blocks kept for reuse; ``None`` when unbounded.

        Defaults to :data:`pdc_cpu.DEFAULT_CACHE_LIMIT`: a sixteenth of the memory
        available to the process, at most 256 MiB. Change it with
        :meth:`set_cache_limit`.
        """
        return self.pool.cache_limit

    def set_cache_limit(self, nbytes: int | None) -> int | None:
        """Bound the host-memory cache to ``nbytes`` bytes and return the previous bound.

        The cache holds blocks whose arrays are all gone, for reuse by later allocations
        they can serve; blocks in use are never counted, evicted or reused. When a
        freed block would take the cache past the bound, the least recently freed
        blocks are released first; a block larger than the bound is released at once.
        Cached blocks beyond a lowered bound are released immediately. ``None`` lifts
        the bound; ``0`` caches nothing. Raises :class:`TypeError` for anything but an
        integer or ``None`` (a ``bool`` included), :class:`ValueError` for a negative one.
        """
        return self.pool.set_cache_limit(nbytes)

    @property
    def cache_ratio(self) -> float | None:
        """The host-memory cache's second bound, relative to the peak of bytes in use
        (:attr:`peak_bytes_in_use`); ``None`` when there is none.

        Defaults to :data:`pdc_cpu.DEFAULT_CACHE_RATIO` (2.0): the cache never holds
        more than twice the most bytes that live arrays have held at once, so a stream
        of ever new sizes cannot fill it. The cache is bounded by the lower of this and
        :attr:`cache_limit`. Change it with :meth:`set_cache_ratio`.
        """
        return self.pool.cache_ratio

    def set_cache_ratio(self, ratio: float | None) -> float | None:
        """Bound the host-memory cache to ``ratio`` times the peak of bytes in use and
        return the previous ratio; cached blocks beyond the new bound are released at
        once. ``None`` lifts this bound (:attr:`cache_limit` still applies). Raises
        :class:`TypeError` for anything but a number or ``None`` (a ``bool`` included),
        :class:`ValueError` for zero, a negative number, infinity or NaN.
        """
        return self.pool.set_cache_ratio(ratio)

    @property
    def peak_bytes_in_use(self) -> int:
        """The most bytes that arrays allocated by this backend have held at once."""
        return self.pool.peak_bytes_in_use

    def create_stream(self) -> CpuStream:
        stream = CpuStream(self)
        self._streams.add(stream)
        return stream

    def create_event(self) -> CpuEvent:
        return CpuEvent()

    def synchronize(self) -> None:
        """Wait for every stream of this backend (work off a stream runs synchronously)."""
        for stream in list(self._streams):
            stream.synchronize()

    def run_python_kernel(
        self,
        body: Callable[..., Any],
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        args: tuple[Any, ...],
        *,
        shared_mem: int = 0,
        stream: Stream | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        """Simulate the numba.cuda-style ``body`` on the host (:func:`pdc_core.cuda.simulate`).

        ``options["cpu_mode"]`` picks the strategy (``"auto"``, ``"lanes"``,
        ``"threads"``). With a ``stream`` the simulation runs on its worker thread, after
        the work queued before it.
        """
        from pdc_core.cuda import simulate

        mode = (options or {}).get("cpu_mode", "auto")

        def run() -> None:
            simulate(body, grid, block, args, shared_mem=shared_mem, mode=mode)

        if stream is None:
            run()
        elif isinstance(stream, CpuStream):
            stream.submit(run)
        else:
            raise TypeError(f"the cpu backend needs a cpu stream, not {stream!r}")

    def launch_persistent_kernel(
        self, kernel: PersistentKernelSpec, rings: RingMemory, **options: Any
    ) -> ResidentKernel:
        """Run ``kernel`` in a worker thread on ``rings``.

        The worker (:class:`~pdc_core.backend.HostWorkerKernel`) calls the kernel's
        ``cpu`` body once per contiguous run of requests with a read-only NumPy record
        array, and writes the record array of replies it returns; state is a NumPy
        array the body updates in place. Worker and host sleep while idle (a doorbell,
        the event loop's selector), so neither burns the GIL. Options: ``worker_wait``
        (``"doorbell"``; ``"spin"`` for measurement only), ``host_wait`` (``"notify"``;
        ``"poll"`` for measurement only), ``idle_timeout`` (seconds).
        """
        from ._persistent import launch

        return launch(self, kernel, rings, **options)
