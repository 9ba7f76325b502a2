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
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import numpy.typing as npt

from pdc_core.backend import MemoryStatistics

from ._numa import host_memory_placement, numa_mapped_host, record_fallback

__all__ = [
    "DevicePool",
    "device_pointer",
    "is_pinned",
    "mapped_empty",
    "pinned_empty",
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
