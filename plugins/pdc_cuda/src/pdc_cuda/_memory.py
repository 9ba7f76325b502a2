"""Memory of the CUDA backend: pinned and mapped host views, device pools, statistics.

Host memory the device works with is handed out as NumPy arrays viewing CuPy's pinned
allocations (``numpy.frombuffer(PinnedMemoryPointer, ...)``); the array keeps the
allocation alive through its ``base``, so nothing is freed while a view exists.

* ``PINNED`` comes from CuPy's pinned-memory pool (``cupy.cuda.alloc_pinned_memory``):
  cheap to reuse, good for staging copies.
* ``MAPPED`` is a dedicated allocation, never pooled: rings of persistent kernels live
  there, and the device addresses it directly (under unified addressing the device
  pointer equals the host pointer; :func:`device_pointer` checks it). Where the platform
  names the NUMA node close to the GPU (:mod:`pdc_cuda._numa`), it is pages placed on
  that node and registered with ``cudaHostRegister(Portable | Mapped)``; otherwise, or
  if that fails (the reason is kept: :func:`pdc_cuda._numa.host_memory_placement`),
  ``cudaHostAlloc(hostAllocMapped | hostAllocPortable)`` (``cupy.cuda.PinnedMemory``).

:class:`CudaMemory` is the memory service of one device (what ``CudaBackend``'s memory
methods delegate to): allocation by kind, mapped views, copies and their staging, the
pool's statistics. It knows the device through :class:`MemoryDevice`, not the backend
class. Copies with a stream are asynchronous: pageable host memory is staged through
pinned memory, and whatever the copy reads or writes is kept alive until the stream
has run it.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from pdc_core import CapabilityError
from pdc_core.backend import MemoryKind, MemoryStatistics, Stream, normalize_shape_dtype

from ._numa import host_memory_placement, numa_mapped_host, record_fallback
from ._properties import CudaDeviceProperties
from ._streams import own_stream, synchronize_stream

__all__ = [
    "CudaMemory",
    "DevicePool",
    "MemoryDevice",
    "check_out",
    "device_pointer",
    "is_pinned",
    "mapped_empty",
    "pinned_empty",
    "require_mapped_memory",
    "view_of_pinned",
]


def _nbytes(shape: tuple[int, ...], dtype: np.dtype[Any]) -> int:
    return int(np.prod(shape, dtype=np.int64)) * dtype.itemsize


def view_of_pinned(pointer: Any, shape: tuple[int, ...], dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    """A NumPy array of ``shape``/``dtype`` over a ``cupy.cuda.PinnedMemoryPointer``.

    The array's base holds the pointer, which holds the allocation.
    """
    nbytes = _nbytes(shape, dtype)
    raw = np.frombuffer(pointer, dtype=np.uint8, count=nbytes)
    return raw.view(dtype).reshape(shape)


def pinned_empty(shape: tuple[int, ...], dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    """Uninitialised page-locked host memory from CuPy's pinned pool."""
    import cupy

    pointer = cupy.cuda.alloc_pinned_memory(max(_nbytes(shape, dtype), 1))
    return view_of_pinned(pointer, shape, dtype)


def mapped_empty(shape: tuple[int, ...], dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    """Pinned host memory the current device can address (never pooled), on the NUMA
    node close to that device where the platform names one (zeroed there;
    uninitialised otherwise)."""
    import cupy

    runtime = cupy.cuda.runtime
    nbytes = max(_nbytes(shape, dtype), 1)
    device = int(runtime.getDevice())
    node = host_memory_placement(device).node
    if node is not None:
        try:
            return numa_mapped_host(nbytes, node).array(shape, dtype)
        except (OSError, runtime.CUDARuntimeError) as exc:
            record_fallback(device, node, exc)
    memory = cupy.cuda.PinnedMemory(nbytes, runtime.hostAllocMapped | runtime.hostAllocPortable)
    return view_of_pinned(cupy.cuda.PinnedMemoryPointer(memory, 0), shape, dtype)


def is_pinned(array: npt.NDArray[Any]) -> bool:
    """Whether ``array``'s memory is page-locked host memory known to CUDA."""
    if array.nbytes == 0:
        return False
    import cupy

    runtime = cupy.cuda.runtime
    try:
        attributes = runtime.pointerGetAttributes(array.ctypes.data)
    except runtime.CUDARuntimeError:
        return False  # pageable memory on CUDA < 11 raises cudaErrorInvalidValue
    return int(attributes.type) == int(runtime.memoryTypeHost)


def device_pointer(array: npt.NDArray[Any]) -> int:
    """The device address of mapped host memory (``cudaPointerGetAttributes``).

    Raises ``ValueError`` when the memory is not registered with CUDA (plain NumPy
    memory, or pinned memory allocated without ``hostAllocMapped`` on a system without
    unified addressing).
    """
    import cupy

    runtime = cupy.cuda.runtime
    host = array.ctypes.data
    try:
        attributes = runtime.pointerGetAttributes(host)
    except runtime.CUDARuntimeError as exc:
        raise ValueError(f"the array at 0x{host:x} is not CUDA host memory: {exc}") from None
    device = int(attributes.devicePointer)
    if int(attributes.type) != int(runtime.memoryTypeHost) or device == 0:
        raise ValueError(
            f"the array at 0x{host:x} is not mapped pinned memory (CUDA memory type "
            f"{int(attributes.type)}); allocate it with MemoryKind.MAPPED"
        )
    return device


class DevicePool:
    """CuPy's device memory pool for one device, with hit/miss counts.

    ``bytes_in_use`` and ``bytes_held`` are CuPy's own figures for the device
    (``used_bytes()``/``total_bytes()``), so they include every CuPy allocation in the
    process, not only pdc's. ``hits``/``misses`` count allocations made through pdc: a
    miss is one that grew the memory the pool holds.
    """

    def __init__(self, device: int, pool: Any) -> None:
        self.device = device
        self.pool = pool
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def malloc(self, nbytes: int) -> Any:
        """A ``cupy.cuda.MemoryPointer`` of ``nbytes`` (call with the device current)."""
        with self._lock:
            before = int(self.pool.total_bytes())
            pointer = self.pool.malloc(nbytes)
            if nbytes == 0:
                pass
            elif int(self.pool.total_bytes()) > before:
                self.misses += 1
            else:
                self.hits += 1
        return pointer

    def statistics(self) -> MemoryStatistics:
        """A snapshot (call with the device current)."""
        limit = int(self.pool.get_limit())
        return MemoryStatistics(
            hits=self.hits,
            misses=self.misses,
            bytes_in_use=int(self.pool.used_bytes()),
            bytes_held=int(self.pool.total_bytes()),
            limit=limit or None,
        )

    def free_cached(self) -> None:
        self.pool.free_all_blocks()


def check_out(src_shape: tuple[int, ...], src_dtype: np.dtype[Any], out: Any) -> None:
    """Raise ``ValueError`` unless ``out`` has ``src_shape`` and ``src_dtype`` (a copy's
    destination)."""
    if tuple(out.shape) != tuple(src_shape) or np.dtype(out.dtype) != src_dtype:
        raise ValueError(
            f"cannot copy an array of shape {tuple(src_shape)} and dtype {src_dtype} into "
            f"one of shape {tuple(out.shape)} and dtype {out.dtype}"
        )


class MemoryDevice(Protocol):
    """What :class:`CudaMemory` needs of its device (``CudaBackend`` has all of it)."""

    @property
    def device(self) -> int:
        """The device index."""

    @property
    def qualified_name(self) -> str:
        """``cuda:N``."""

    @property
    def properties(self) -> CudaDeviceProperties:
        """The device's properties (managed memory, mapping host memory)."""

    def device_context(self) -> contextlib.AbstractContextManager[Any]:
        """The device current for CuPy inside the block."""


def require_mapped_memory(device: MemoryDevice, action: str) -> None:
    """Raise :class:`CapabilityError` naming ``action`` unless ``device`` can map host
    memory."""
    props = device.properties
    if not props.can_map_host_memory:
        raise CapabilityError(
            f"cannot {action} on {device.qualified_name} ({props.name}): the device reports "
            f"canMapHostMemory={props.can_map_host_memory}"
        )


class CudaMemory:
    """The memory service of one CUDA device: allocation, copies, statistics.

    ``DEVICE`` memory comes from :attr:`pool`, ``MANAGED`` from ``cudaMallocManaged``,
    ``PINNED`` from CuPy's pinned pool, ``MAPPED`` from :func:`mapped_empty`, ``HOST``
    is pageable NumPy memory.
    """

    def __init__(self, device: MemoryDevice, pool: DevicePool) -> None:
        self._device = device
        #: The device pool ``DEVICE`` allocations come from (replaced by
        #: :meth:`use_async_pool`).
        self.pool = pool

    def allocate(self, shape: tuple[int, ...], dtype: np.dtype[Any], kind: MemoryKind) -> Any:
        """An uninitialised array of ``kind`` (the backend contract's ``allocate``)."""
        shape, dtype = normalize_shape_dtype(shape, dtype)
        kind = MemoryKind(kind)
        if kind is MemoryKind.HOST:
            return np.empty(shape, dtype)
        device = self._device
        if kind is MemoryKind.PINNED:
            with device.device_context():
                return pinned_empty(shape, dtype)
        if kind is MemoryKind.MAPPED:
            require_mapped_memory(device, "allocate mapped host memory")
            with device.device_context():
                return mapped_empty(shape, dtype)
        import cupy

        with device.device_context():
            if kind is MemoryKind.MANAGED:
                if device.properties.managed_memory is False:
                    raise CapabilityError(
                        f"{device.qualified_name} ({device.properties.name}) has no managed memory"
                    )
                pointer = cupy.cuda.malloc_managed(max(_nbytes(shape, dtype), 1))
            else:
                pointer = self.pool.malloc(_nbytes(shape, dtype))
            return cupy.ndarray(shape, dtype, memptr=pointer)

    def device_pointer(self, host: npt.NDArray[Any]) -> int:
        """The device address of a ``MAPPED`` host array."""
        with self._device.device_context():
            return device_pointer(host)

    def mapped_device_array(self, host: npt.NDArray[Any]) -> Any:
        """A CuPy array over the same memory as a ``MAPPED`` host array (no copy)."""
        import cupy

        if not host.flags.c_contiguous:
            raise ValueError("a mapped array must be C-contiguous to be viewed from the device")
        with self._device.device_context():
            address = device_pointer(host)
            memory = cupy.cuda.UnownedMemory(
                address, max(host.nbytes, 1), host, self._device.device
            )
            return cupy.ndarray(host.shape, host.dtype, memptr=cupy.cuda.MemoryPointer(memory, 0))

    def _cupy_array(self, device: Any) -> Any:
        import cupy

        if isinstance(device, cupy.ndarray):
            return device
        if hasattr(device, "__cuda_array_interface__") or hasattr(device, "__dlpack__"):
            with self._device.device_context():
                return cupy.asarray(device)
        raise TypeError(
            f"expected a CuPy array (or an object with __cuda_array_interface__), "
            f"not {type(device).__name__}"
        )

    def to_device(self, host: npt.NDArray[Any], out: Any, stream: Stream | None) -> Any:
        """Copy ``host`` to device memory (``out``, or a new array): waited for without
        a ``stream``; queued on it, staged through pinned memory, otherwise."""
        import cupy

        source = np.asarray(host)
        normalize_shape_dtype(source.shape, source.dtype)
        with self._device.device_context():
            if out is None:
                out = self.allocate(source.shape, source.dtype, MemoryKind.DEVICE)
            else:
                out = self._cupy_array(out)
                check_out(source.shape, source.dtype, out)
                if not out.flags.c_contiguous:
                    raise ValueError("the destination device array must be C-contiguous")
            if source.size == 0:
                return out
            if stream is None:
                current = cupy.cuda.get_current_stream()
                out.set(np.ascontiguousarray(source), stream=current)
                synchronize_stream(current)
                return out
            cuda_stream = own_stream(self._device, stream)
            if source.flags.c_contiguous and is_pinned(source):
                staged = source
            else:
                staged = pinned_empty(source.shape, source.dtype)
                np.copyto(staged, source)
            out.set(staged, stream=cuda_stream.cupy)
            # Keep the host memory alive until the copy has read it.
            cuda_stream.keep_alive_until_done(staged)
            return out

    def to_host(
        self, device: Any, out: npt.NDArray[Any] | None, stream: Stream | None
    ) -> npt.NDArray[Any]:
        """Copy ``device`` to host memory (``out``, or a new pinned array with a stream):
        waited for without a ``stream``; queued on it otherwise."""
        if isinstance(device, np.ndarray):
            source_host = device
            if out is None:
                return source_host.copy()
            check_out(source_host.shape, source_host.dtype, out)
            np.copyto(out, source_host)
            return out
        array = self._cupy_array(device)
        with self._device.device_context():
            if out is not None:
                if not isinstance(out, np.ndarray):
                    raise TypeError(f"out must be a NumPy array, not {type(out).__name__}")
                check_out(array.shape, array.dtype, out)
                if not (out.flags.c_contiguous and out.flags.writeable):
                    raise ValueError("out must be a writeable C-contiguous NumPy array")
            if array.size == 0:
                return out if out is not None else np.empty(array.shape, array.dtype)
            if stream is None:
                return array.get(out=out)  # type: ignore[no-any-return]
            cuda_stream = own_stream(self._device, stream)
            if out is None:
                out = pinned_empty(array.shape, array.dtype)
            if is_pinned(out):
                array.get(stream=cuda_stream.cupy, out=out, blocking=False)
                cuda_stream.keep_alive_until_done(array)
                return out
            # Pageable destination: copy into pinned staging, then into ``out`` from a
            # host callback that runs once the stream has reached it.
            staged = pinned_empty(array.shape, array.dtype)
            array.get(stream=cuda_stream.cupy, out=staged, blocking=False)
            target = out
            cuda_stream.cupy.launch_host_func(lambda _arg: np.copyto(target, staged), None)
            cuda_stream.keep_alive_until_done((array, staged))
            return out

    def statistics(self) -> MemoryStatistics:
        """The device pool's statistics."""
        with self._device.device_context():
            return self.pool.statistics()

    def free_cached(self) -> None:
        """Return the cached blocks of the device pool and CuPy's pinned pool to CUDA."""
        import cupy

        with self._device.device_context():
            self.pool.free_cached()
            cupy.get_default_pinned_memory_pool().free_all_blocks()

    def use_async_pool(self) -> None:
        """Switch CuPy's allocator (process-wide) to ``cupy.cuda.MemoryAsyncPool``, and
        :attr:`pool` to it."""
        import cupy

        with self._device.device_context():
            pool = cupy.cuda.MemoryAsyncPool()
            cupy.cuda.set_allocator(pool.malloc)
            self.pool = DevicePool(self._device.device, pool)
