"""Body of PyDotCompute\'s :mod:`pdc_core.backends.cpu`; see its docstring."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from pdc_core import get_backend
from pdc_core.backend import MemoryKind, normalize_shape_dtype

from ..._buffer import zero_fill  # the one fill that takes raw bytes (V5); not public
from .base import BackendType, KernelExecutionResult

__all__ = ["CPUBackend", "matrix_multiply_cpu", "vector_add_cpu"]


class CPUBackend:
    """PyDotCompute's CPU backend API over pdc's ``cpu`` backend (see the module)."""

    def __init__(self) -> None:
        self._backend = get_backend("cpu")

    @property
    def backend_type(self) -> BackendType:
        """:attr:`BackendType.CPU <pdc_core.backends.base.BackendType.CPU>`."""
        return BackendType.CPU

    @property
    def is_available(self) -> bool:
        """Whether pdc's ``cpu`` backend can run here."""
        return type(self._backend).availability().available

    @property
    def device_count(self) -> int:
        """The devices pdc's ``cpu`` backend reports (one: the host)."""
        return len(type(self._backend).devices())

    def allocate(self, shape: tuple[int, ...], dtype: npt.DTypeLike) -> npt.NDArray[Any]:
        """An uninitialised host array, allocated by pdc's ``cpu`` backend (a subarray
        dtype's shape is appended to ``shape``, as NumPy does)."""
        shape, canonical = normalize_shape_dtype(shape, dtype)
        return np.asarray(self._backend.allocate(shape, canonical, MemoryKind.HOST))

    def allocate_zeros(self, shape: tuple[int, ...], dtype: npt.DTypeLike) -> npt.NDArray[Any]:
        """A zero-filled host array, allocated by pdc's ``cpu`` backend."""
        array = self.allocate(shape, dtype)
        zero_fill(array)  # fill(0) refuses raw bytes (V5)
        return array

    def free(self, array: npt.NDArray[Any]) -> None:
        """Nothing to do: host memory is released with the array."""

    def copy_to_device(self, host_array: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """A device copy of ``host_array`` (pdc's ``to_device``)."""
        return np.asarray(self._backend.to_device(host_array))

    def copy_to_host(self, device_array: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """A host copy of ``device_array`` (pdc's ``to_host``)."""
        return self._backend.to_host(device_array)

    def synchronize(self) -> None:
        """Wait for queued work (pdc's ``synchronize``)."""
        self._backend.synchronize()

    def execute_kernel(
        self,
        kernel: Callable[..., Any],
        grid_size: tuple[int, ...],
        block_size: tuple[int, ...],
        *args: Any,
        **kwargs: Any,
    ) -> KernelExecutionResult:
        """Call ``kernel(*args, **kwargs)`` once on the host; its outcome and time.

        An exception it raises is returned as the result's ``error`` (PyDotCompute's
        contract); ``grid_size`` and ``block_size`` are not used on the host.
        """
        started = time.perf_counter()
        try:
            kernel(*args, **kwargs)
        except Exception as error:
            return KernelExecutionResult(False, (time.perf_counter() - started) * 1e3, error)
        return KernelExecutionResult(True, (time.perf_counter() - started) * 1e3)

    def compile_kernel(
        self, func: Callable[..., Any], signature: str | None = None
    ) -> Callable[..., Any]:
        """``func`` itself: a host function needs no compiling (pdc's ``@kernel``
        compiles on its first launch on each device)."""
        return func

    def parallel_for(self, start: int, end: int, func: Callable[[int], None]) -> None:
        """Call ``func(i)`` for each ``i`` in ``range(start, end)``, in order."""
        for index in range(start, end):
            func(index)

    def __repr__(self) -> str:
        return f"CPUBackend(available={self.is_available})"


def vector_add_cpu(a: npt.NDArray[Any], b: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """``a + b`` on the host (write kernels with ``@kernel`` to run them anywhere)."""
    return np.asarray(np.add(a, b))


def matrix_multiply_cpu(a: npt.NDArray[Any], b: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """``a @ b`` on the host (write kernels with ``@kernel`` to run them anywhere)."""
    return np.asarray(np.matmul(a, b))
