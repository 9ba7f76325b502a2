"""The metal backend's memory: MLX allocations, NumPy views of them, copies, counters.

:class:`MetalMemory` is what :class:`pdc_metal.MetalBackend`'s memory methods delegate
to (the backend's docstrings state the guarantees, and the memory model is in
:mod:`pdc_metal._backend`'s docstring). It knows no backend class: it takes MLX and
its device through :class:`~pdc_metal._mlx.MlxDevice`, and streams as
:class:`~pdc_metal._streams.MetalStream` (``None``: now, on the calling thread).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from pdc_core import BackendError, UnifiedBuffer
from pdc_core.backend import MemoryKind, MemoryStatistics, normalize_shape_dtype

from . import _mlx
from ._mlx import MlxDevice
from ._streams import MetalStream

__all__ = ["MetalMemory"]


class MetalMemory:
    """Memory of one metal backend: every allocation is MLX's (see the module)."""

    __slots__ = ("_mlx_device", "_mx")

    def __init__(self, device: MlxDevice) -> None:
        self._mx = device.mx
        self._mlx_device = device.mlx_device

    def allocate(
        self, shape: tuple[int, ...], dtype: np.dtype[Any], kind: MemoryKind = MemoryKind.DEVICE
    ) -> Any:
        """Zero-filled MLX memory: a NumPy view of it for host kinds, else the array."""
        shape, dtype = normalize_shape_dtype(shape, dtype)
        kind = MemoryKind(kind)
        owner = self._mx.zeros(shape, dtype=_mlx.to_mlx_dtype(dtype), stream=self._mlx_device)
        self._mx.eval(owner)
        if kind in (MemoryKind.DEVICE, MemoryKind.MANAGED):
            return owner
        host: npt.NDArray[Any] = np.asarray(owner)
        if host.dtype != dtype or host.shape != shape or not host.flags.c_contiguous:
            raise BackendError(
                f"MLX exported a {host.dtype} {host.shape} array (C-contiguous: "
                f"{host.flags.c_contiguous}) for a {dtype} {shape} allocation"
            )
        return host

    def owner(self, host: npt.NDArray[Any]) -> Any:
        """The MLX array whose buffer ``host`` views, or ``None``."""
        base: Any = host
        while isinstance(base, np.ndarray):
            base = base.base
        if isinstance(base, memoryview) and isinstance(base.obj, self._mx.array):
            return base.obj
        return None

    def can_view(self, host: npt.NDArray[Any]) -> bool:
        """True when ``host`` is exactly a whole buffer MLX allocated."""
        return self.view_problem(host) is None

    def view_problem(self, host: Any) -> str | None:
        """Why ``host`` cannot be viewed as MLX memory, or ``None`` when it can."""
        if not isinstance(host, np.ndarray):
            return f"{type(host).__name__} is not a NumPy array"
        owner = self.owner(host)
        if owner is None:
            return (
                "MLX cannot wrap memory it did not allocate (NumPy -> MLX always copies); "
                "allocate it with the metal backend (UnifiedBuffer(..., backend='metal') or "
                "backend.allocate(..., MemoryKind.HOST)), or copy it with to_device()"
            )
        whole = np.asarray(owner)
        if (
            host.ctypes.data != whole.ctypes.data
            or host.nbytes != whole.nbytes
            or not host.flags.c_contiguous
        ):
            return (
                "the array is a partial or strided view of an MLX allocation; only a whole, "
                "C-contiguous allocation can be viewed"
            )
        try:
            _mlx.to_mlx_dtype(host.dtype)
        except TypeError as exc:
            return str(exc)
        return None

    def device_view(self, host: npt.NDArray[Any]) -> Any:
        """A new, evaluated MLX array over the same bytes as ``host``; never a copy."""
        problem = self.view_problem(host)
        if problem is not None:
            raise BackendError(f"the metal backend cannot view this array: {problem}")
        mx = self._mx
        owner = self.owner(host)
        mlx_dtype = _mlx.to_mlx_dtype(host.dtype)
        view = owner if owner.dtype == mlx_dtype else mx.view(owner, mlx_dtype)
        view = view.reshape(host.shape)
        mx.eval(view)
        return view

    def view_or_copy(self, host: npt.NDArray[Any]) -> Any:
        """``host`` as MLX memory: a device view where MLX allows, else a copy."""
        return self.device_view(host) if self.can_view(host) else self.to_device(host)

    def to_device(
        self, host: npt.NDArray[Any], out: Any = None, stream: MetalStream | None = None
    ) -> Any:
        """Copy ``host`` into MLX memory (a new MLX array, or ``out``'s buffer)."""
        source = np.asarray(host)
        _mlx.to_mlx_dtype(source.dtype)
        if out is None and stream is None:
            mx = self._mx
            copy = mx.array(np.ascontiguousarray(source), dtype=_mlx.to_mlx_dtype(source.dtype))
            mx.eval(copy)
            return copy
        if out is None:
            out = self.allocate(source.shape, source.dtype, MemoryKind.DEVICE)
        target = self.writable_host_view(out, source)
        if stream is None:
            np.copyto(target, source)
        else:
            stream.enqueue(lambda: np.copyto(target, source))
        return out

    def to_host(
        self, device: Any, out: npt.NDArray[Any] | None = None, stream: MetalStream | None = None
    ) -> npt.NDArray[Any]:
        """Evaluate ``device`` (an MLX array) and copy it to host memory."""
        mx = self._mx
        if not isinstance(device, mx.array):
            raise TypeError(f"to_host needs an MLX array, not {type(device).__name__}")
        dtype = _mlx.from_mlx_dtype(device.dtype)
        shape = tuple(device.shape)
        if out is None:
            out = np.empty(shape, dtype=dtype)
        elif not isinstance(out, np.ndarray) or out.shape != shape or out.dtype != dtype:
            raise ValueError(
                f"cannot copy an MLX array of shape {shape} and dtype {dtype} into "
                f"{getattr(out, 'shape', None)} {getattr(out, 'dtype', type(out).__name__)}"
            )
        elif not out.flags.writeable:
            raise ValueError("the output array of to_host is read-only")
        target = out
        if stream is None:
            np.copyto(target, np.asarray(device))
        else:
            # Start evaluation here: the graph may live on this thread's streams,
            # which the stream's worker thread cannot evaluate.
            mx.async_eval(device)
            stream.enqueue(lambda: np.copyto(target, np.asarray(device)))
        return out

    def writable_host_view(self, out: Any, source: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """A NumPy view through which ``source`` can be written into ``out``'s memory."""
        if isinstance(out, UnifiedBuffer):
            target = out.host
        elif isinstance(out, self._mx.array):
            target = np.asarray(out)
        elif isinstance(out, np.ndarray):
            target = out
        else:
            raise TypeError(
                f"out must be an MLX array, a NumPy array or a UnifiedBuffer, not {type(out)!r}"
            )
        if target.shape != source.shape:
            raise ValueError(
                f"cannot write an array of shape {source.shape} into one of shape {target.shape}"
            )
        if target.dtype != source.dtype:
            raise TypeError(
                f"cannot write an array of dtype {source.dtype} into one of dtype {target.dtype}"
            )
        if not (target.flags.writeable and target.flags.c_contiguous):
            raise ValueError(
                "the output's memory is not a writeable C-contiguous buffer "
                "(an MLX broadcast or strided view cannot be written in place)"
            )
        return target

    def statistics(self) -> MemoryStatistics:
        """MLX's allocator, process-wide for this device."""
        mx = self._mx
        active = int(mx.get_active_memory())
        return MemoryStatistics(
            hits=0,
            misses=0,
            bytes_in_use=active,
            bytes_held=active + int(mx.get_cache_memory()),
            limit=int(mx.get_memory_limit()),
        )

    def report(self) -> dict[str, int]:
        """MLX's own counters: active, cache and peak bytes, and the memory limit."""
        mx = self._mx
        return {
            "active": int(mx.get_active_memory()),
            "cache": int(mx.get_cache_memory()),
            "peak": int(mx.get_peak_memory()),
            "limit": int(mx.get_memory_limit()),
        }

    def reset_peak(self) -> None:
        """Reset MLX's peak-memory counter."""
        self._mx.reset_peak_memory()

    def free_cached(self) -> None:
        """Give MLX's cached buffers back to the system."""
        self._mx.clear_cache()
