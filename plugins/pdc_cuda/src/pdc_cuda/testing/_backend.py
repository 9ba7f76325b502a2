"""A cuda backend whose resident ring kernels are host builds running on CPU threads.

:class:`HostCudaBackend` is the real :class:`~pdc_cuda.CudaBackend` -- its resident-kernel
launch, pipeline launch, links, residency bookkeeping and deferred frees are the code a
GPU runs -- with the device replaced by the host: memory is host memory (mapped memory
is ordinary NumPy memory, device memory a NumPy array with CuPy's ``data.ptr``, ``get``
and ``set``), copies are synchronous, and :meth:`HostCudaBackend.compile_kernel` returns
the host build of the rendered source (after NVRTC has accepted it) instead of a CuPy
module. A launch runs ``pdc_ring_kernel`` as one block of ``threads`` OS threads; the
launch's stream is done when they have all returned, and failed (the stream's
``done`` raises :class:`HostKernelFault`, as a faulted CUDA stream raises) when the
launch failed, e.g. on an atomic whose scope is narrower than its memory needs.

Every region the backend allocates is registered with the scope its atomics need:
``MAPPED`` (and ``PINNED``/``HOST``) memory system scope, ``DEVICE``/``MANAGED`` memory
device scope. The threads check each ``cuda::atomic_ref`` and ``atomic*()`` against it.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from pdc_core import BackendError, Capability, CapabilityError, DeviceInfo
from pdc_core.backend import (
    Availability,
    Event,
    MemoryKind,
    MemoryStatistics,
    Stream,
    normalize_shape_dtype,
    strict_int,
)

from .._backend import CudaBackend
from .._context import DEFAULT_GREEN_SMS
from .._kernels import CudaKernel
from .._launch import Dims, explicit_config
from .._memory import check_out
from .._nvrtc import find_nvrtc
from .._places import ContextKind, PrimaryPlace, ResidentPlace
from .._properties import CudaDeviceProperties
from .._ring_source import KERNEL_NAME
from .._streams import CudaEvent, CudaStream
from ._build import HostBuild, HostLaunch, build_ring_kernel, compiler_missing, load_instance

__all__ = ["DeviceArray", "HostCudaBackend", "HostKernel", "HostKernelFault", "HostStream"]

#: Scope ranks (pdc_cuda_host.h): what an atomic on a region must at least have.
SYSTEM_SCOPE = 3
DEVICE_SCOPE = 2

#: Launches not yet joined: aborted and joined at interpreter exit, so no kernel thread
#: outlives the memory it reads.
_live: set[HostLaunch] = set()
_live_lock = threading.Lock()


@atexit.register
def _join_all() -> None:
    with _live_lock:
        launches = list(_live)
    for launch in launches:
        launch.join(abort=True)


class HostKernelFault(RuntimeError):
    """The host build's launch failed (what a CUDA stream's error is to the GPU build)."""


class _Pointer:
    def __init__(self, ptr: int) -> None:
        self.ptr = ptr


class DeviceArray(np.ndarray[Any, Any]):
    """*Device* memory of the host backend: a NumPy array with the slice of CuPy's API
    the cuda backend uses on device arrays (``data.ptr``, ``get``, ``set``)."""

    @property
    def data(self) -> _Pointer:  # type: ignore[override]
        """An object whose ``ptr`` is the array's address, as CuPy's ``data.ptr``."""
        return _Pointer(int(self.ctypes.data))

    def get(self, stream: Any = None, out: Any = None, blocking: bool = True) -> Any:
        """A host copy of the array, or the values copied into ``out`` (returned), as
        CuPy's ``get``; synchronous, whatever ``stream`` and ``blocking`` say."""
        host = np.asarray(self)
        if out is None:
            return host.copy()
        np.copyto(out, host)
        return out

    def set(self, array: Any, stream: Any = None) -> None:
        """Copy ``array`` (reshaped to this shape) into the array, as CuPy's ``set``;
        synchronous, whatever ``stream`` says."""
        np.copyto(np.asarray(self), np.asarray(array).reshape(self.shape))


class HostStream(CudaStream):
    """A stream of the host backend: copies on it are synchronous; a ring-kernel launch
    on it runs until its threads return (:attr:`done` then; ``HostKernelFault`` if
    the launch failed)."""

    _ids = itertools.count(1)

    def __init__(self, backend: HostCudaBackend) -> None:
        super().__init__(backend, self, backend._streams.discard)
        self._ptr = next(self._ids)
        self.launch: HostLaunch | None = None

    @property
    def ptr(self) -> int:
        return self._ptr

    def attach(self, launch: HostLaunch) -> None:
        """Make ``launch`` the stream's resident launch (joined at exit if still
        running); :class:`RuntimeError` while another one runs on it."""
        if self.launch is not None and self.launch.status == 0:
            raise RuntimeError("one resident launch per stream")
        self.launch = launch
        with _live_lock:
            _live.add(launch)

    def keep_alive_until_done(self, obj: Any) -> None:
        """Nothing to keep: copies are synchronous."""

    def _check(self) -> None:
        launch = self.launch
        if launch is not None and launch.status == 2:
            raise HostKernelFault(launch.failure)

    @property
    def done(self) -> bool:
        launch = self.launch
        if launch is None:
            return True
        if launch.status == 0:
            return False
        self._check()
        return True

    def synchronize(self) -> None:
        launch = self.launch
        if launch is not None:
            launch.join()
            with _live_lock:
                _live.discard(launch)
        self._check()

    def wait_event(self, event: Event) -> None:
        """Nothing to wait for: work on these streams completes as it is queued, and a
        resident launch is never waited for."""

    def discard(self) -> None:
        """Drop the stream; a launch still running is aborted (its threads unwind at
        their next wait or poll) and joined."""
        launch = self.launch
        if launch is not None:
            launch.join(abort=True)
            with _live_lock:
                _live.discard(launch)
        super().discard()

    def __repr__(self) -> str:
        return f"<HostStream {self._backend.qualified_name} #{self._ptr}>"


class HostEvent(CudaEvent):
    """Done when the launch on its stream (if any, when recorded) is."""

    def __init__(self) -> None:
        super().__init__(None)
        self._launch: HostLaunch | None = None

    def record(self, stream: Stream) -> None:
        if not isinstance(stream, HostStream):
            raise TypeError(f"a host event can only be recorded on a host stream, not {stream!r}")
        self._launch = stream.launch

    @property
    def done(self) -> bool:
        return self._launch is None or self._launch.status != 0

    def synchronize(self) -> None:
        while not self.done:
            time.sleep(0.001)


class HostKernel(CudaKernel):
    """The host build of a rendered ring kernel: :meth:`launch` runs one block of
    ``block`` OS threads on a :class:`HostStream`."""

    def __init__(
        self, backend: HostCudaBackend, build: HostBuild, name: str, options: tuple[str, ...]
    ) -> None:
        super().__init__(backend, None, name, build.source, options)
        self.host_backend = backend
        self.build = build

    @property
    def max_threads_per_block(self) -> int:
        return self.host_backend.max_threads_per_block

    def launch(
        self,
        grid: Dims,
        block: Dims,
        args: Any,
        *,
        stream: Stream | None = None,
        shared_mem: int = 0,
    ) -> None:
        grid3, block3 = explicit_config(
            grid, block, max_threads_per_block=self.max_threads_per_block
        )
        if grid3 != (1, 1, 1) or block3[1:] != (1, 1):
            raise ValueError(
                f"the host build runs one block of threads along x, not grid {grid3} block {block3}"
            )
        threads = int(block3[0])
        if not 1 <= threads <= self.max_threads_per_block:
            raise ValueError(f"threads must be in 1..{self.max_threads_per_block}, not {threads}")
        if not isinstance(stream, HostStream):
            raise TypeError("a host ring kernel is launched on a HostStream")
        in_region, out_region, state = (_address(arg) for arg in args)
        instance = load_instance(self.build)
        stream.attach(
            instance.launch(in_region, out_region, state, threads, self.host_backend.regions())
        )


def _address(value: Any) -> int:
    if isinstance(value, np.ndarray):
        return int(value.ctypes.data)
    return int(value)


class HostCudaBackend(CudaBackend):
    """The cuda backend with a host device: see the module documentation.

    ``max_threads_per_block`` caps a launch's threads (as a device's limit does): the
    ring kernel's launch takes ``min(threads, this)``. ``device`` is the index the
    instance stands for (``cuda:<device>``): several instances with distinct indexes are
    several devices, e.g. ``devices=[HostCudaBackend(device=i) for i in range(4)]`` for
    a kernel mesh. Like separate GPUs they share nothing but the host: each has its own
    allocations, residency bookkeeping and loaded kernels (each block has its own loaded
    copy of its build anyway; see the module ``_build``).

    ``context`` is the placement, as for :class:`~pdc_cuda.CudaBackend`: the host
    build's resident kernels are CPU threads that nothing waits for, so only
    ``"shared"`` changes anything -- it refuses what would wait for a kernel resident in
    the primary context on a GPU (a new module, ``free_cached_memory``), as the GPU does.
    ``resident_place`` replaces where resident kernels run (a test's own, e.g. one
    over a fake CUDA driver).
    """

    capabilities: ClassVar[frozenset[Capability]] = frozenset(
        {
            Capability.DEVICE_MEMORY,
            Capability.PINNED_MEMORY,
            Capability.MAPPED_MEMORY,
            Capability.MANAGED_MEMORY,
            Capability.PERSISTENT_KERNELS,
            Capability.PIPELINES,
        }
    )

    def __init__(
        self,
        max_threads_per_block: int = 1024,
        multiprocessors: int = 16,
        device: int = 0,
        *,
        context: str | None = None,
        resident_place: ResidentPlace | None = None,
    ) -> None:
        device = strict_int(device, "device", "a device index (an int)")
        if device < 0:
            raise ValueError(f"device must be a non-negative int, not {device!r}")
        for name, value in (
            ("max_threads_per_block", max_threads_per_block),
            ("multiprocessors", multiprocessors),
        ):
            if strict_int(value, name) < 1:
                raise ValueError(f"{name} must be at least 1, not {value!r}")
        max_threads_per_block = int(max_threads_per_block)
        multiprocessors = int(multiprocessors)
        self.device = device
        self.max_threads_per_block = max_threads_per_block
        self._setup_residency(context, DEFAULT_GREEN_SMS)
        #: Where resident kernels run when given (a test's place, e.g. a fake driver's).
        self._given_place = resident_place
        self._regions: list[tuple[weakref.ref[Any], int, int, int]] = []
        #: Every host build this backend compiled a kernel into, in order.
        self.builds: list[HostBuild] = []
        self._properties = CudaDeviceProperties.from_dict(
            device,
            {
                "name": b"host build of the CUDA ring kernel (CPU threads)",
                "major": 9,
                "minor": 0,
                "canMapHostMemory": 1,
                "unifiedAddressing": 1,
                "kernelExecTimeoutEnabled": 0,
                "concurrentKernels": 1,
                "multiProcessorCount": multiprocessors,
                "maxThreadsPerBlock": max_threads_per_block,
            },
        )

    # -- discovery ----------------------------------------------------------------------

    @classmethod
    def availability(cls) -> Availability:
        missing = compiler_missing()
        if missing is not None:
            return Availability.no(missing)
        try:
            find_nvrtc()
        except Exception as exc:  # NvrtcUnavailable: the gate cannot run
            return Availability.no(f"NVRTC cannot be loaded to check sources first: {exc}")
        return Availability.yes("host builds of the ring kernel on CPU threads")

    @classmethod
    def devices(cls) -> list[DeviceInfo]:
        return [HostCudaBackend().properties.to_device_info(cls.name)]

    @property
    def properties(self) -> CudaDeviceProperties:
        return self._properties

    @contextlib.contextmanager
    def device_context(self) -> Iterator[None]:
        yield

    # -- memory -------------------------------------------------------------------------

    def allocate(
        self, shape: tuple[int, ...], dtype: np.dtype[Any], kind: MemoryKind = MemoryKind.DEVICE
    ) -> Any:
        shape, dtype = normalize_shape_dtype(shape, dtype)
        kind = MemoryKind(kind)
        array: npt.NDArray[Any] = np.zeros(shape, dtype)
        if kind in (MemoryKind.DEVICE, MemoryKind.MANAGED):
            array = array.view(DeviceArray)
            self._register(array, DEVICE_SCOPE)
        else:
            self._register(array, SYSTEM_SCOPE)
        return array

    def _register(self, array: npt.NDArray[Any], scope: int) -> None:
        with self._lock:
            self._regions = [entry for entry in self._regions if entry[0]() is not None]
            self._regions.append(
                (weakref.ref(array), int(array.ctypes.data), max(array.nbytes, 1), scope)
            )

    def regions(self) -> list[tuple[int, int, int]]:
        """``(address, size, scope rank)`` of every live allocation of this backend."""
        with self._lock:
            return [
                (base, size, scope) for ref, base, size, scope in self._regions if ref() is not None
            ]

    def device_pointer(self, host: npt.NDArray[Any]) -> int:
        return int(host.ctypes.data)

    def mapped_device_array(self, host: npt.NDArray[Any]) -> Any:
        return host.view(DeviceArray)

    def to_device(
        self, host: npt.NDArray[Any], out: Any = None, stream: Stream | None = None
    ) -> Any:
        source = np.asarray(host)
        if out is None:
            out = self.allocate(source.shape, source.dtype, MemoryKind.DEVICE)
        check_out(source.shape, source.dtype, out)
        np.copyto(np.asarray(out), source)
        return out

    def to_host(
        self, device: Any, out: npt.NDArray[Any] | None = None, stream: Stream | None = None
    ) -> npt.NDArray[Any]:
        source = np.asarray(device)
        if out is None:
            return np.array(source, copy=True)
        check_out(source.shape, source.dtype, out)
        np.copyto(out, source)
        return out

    def memory_statistics(self) -> MemoryStatistics:
        return MemoryStatistics()

    def free_cached_memory(self) -> None:
        self.residency.refuse_beside_shared("free cached memory (cudaFree, cudaFreeHost)")

    def use_async_memory_pool(self) -> None:
        raise CapabilityError("the host build has no CuPy memory pool")

    # -- streams ------------------------------------------------------------------------

    def _make_place(self, kind: ContextKind) -> ResidentPlace:
        """The given place, else the primary context: the host build's kernels are CPU
        threads nothing waits for, so only ``"shared"`` refuses what would block on a GPU."""
        if self._given_place is not None:
            return self._given_place
        return PrimaryPlace(self, shares_primary=kind == "shared", kind=kind)

    def create_stream(self) -> HostStream:
        stream = HostStream(self)
        self._streams.add(stream)
        return stream

    def create_event(self) -> HostEvent:
        return HostEvent()

    def synchronize(self) -> None:
        """Wait for every stream whose launch is not resident (copies are synchronous)."""
        resident = {id(kernel.stream) for kernel in self.resident_kernels()}
        for stream in list(self._streams):
            if id(stream) not in resident:
                stream.synchronize()

    # -- kernels ------------------------------------------------------------------------

    def compile_kernel(self, source: str, name: str, options: tuple[str, ...] = ()) -> HostKernel:
        """The host build of a rendered ring kernel (NVRTC must accept it first: a
        :class:`~pdc_cuda.CudaCompileError` otherwise, as on a GPU)."""

        def load(options: tuple[str, ...]) -> HostKernel:
            # Here, after the cache's refusal: in the shared placement a new module is
            # refused first, whatever it is, as on a GPU.
            if name != KERNEL_NAME:
                raise ValueError(f"the host build runs the resident ring kernel only, not {name!r}")
            kernel = HostKernel(self, build_ring_kernel(source, options=options), name, options)
            with self._lock:
                self.builds.append(kernel.build)
            return kernel

        # As on a GPU, the cache refuses a new module in the shared placement.
        return self._kernels.compile(source, name, options, self.residency.refuse_module_load, load)

    def check_beside_resident(self) -> str:
        """``pdc check``'s probe beside a resident kernel. In the shared placement it is
        the GPU's: a new module refused at once. Elsewhere the GPU's probe runs a CuPy op
        and a new plain kernel, which the host build has neither of, and its resident
        kernels are CPU threads nothing waits for: raises
        :class:`~pdc_core.CapabilityError`, which the check reports as a skip saying so."""
        if any(kernel.shares_primary for kernel in self.resident_kernels()):
            return super().check_beside_resident()
        raise CapabilityError(
            "the host build runs no CuPy op or plain kernel beside its resident kernels "
            "(CPU threads that nothing waits for); on a GPU both run there"
        )

    def launch_kernel(
        self,
        kernel: CudaKernel,
        grid: Dims,
        block: Dims,
        args: tuple[Any, ...],
        *,
        stream: Stream | None = None,
        shared_mem: int = 0,
    ) -> None:
        raise BackendError("the host build runs resident ring kernels only")

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
        raise BackendError("the host build runs resident ring kernels only")
