"""Body of PyDotCompute\'s :mod:`pdc_core.decorators.kernel`; see its docstring."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from pdc_core import kernel

__all__ = ["KernelRegistry", "cuda_source", "get_kernel_registry", "gpu_kernel", "kernel"]

_F = TypeVar("_F", bound=Callable[..., Any])

#: PyDotCompute's other name for :func:`~pdc_core.kernel`.
gpu_kernel = kernel


def cuda_source(source: str) -> Callable[[_F], _F]:
    """Decorator: set ``func.__cuda_source__ = source`` and return ``func`` unchanged.

    pdc compiles and launches CUDA C source with ``pdc_core.kernel.source(source)``.
    """

    def mark(func: _F) -> _F:
        func.__cuda_source__ = source  # type: ignore[attr-defined]
        return func

    return mark


class KernelRegistry:
    """Kernels by name, one table per process (``KernelRegistry()`` is always it)."""

    _instance: ClassVar[KernelRegistry | None] = None
    _kernels: dict[str, Callable[..., Any]]

    def __new__(cls) -> KernelRegistry:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
            cls._instance._kernels = {}
        return cls._instance

    def register(self, name: str, kernel: Callable[..., Any], *, overwrite: bool = False) -> None:
        """Register ``kernel`` as ``name``; ``ValueError`` if taken, unless ``overwrite``.
        A name that is not a non-empty str, or a kernel that is not callable, is a
        ``TypeError`` naming it (nothing is registered)."""
        if not isinstance(name, str) or not name:
            raise TypeError(f"a kernel's name must be a non-empty str, got {name!r}")
        if not callable(kernel):
            raise TypeError(f"kernel {name!r} must be callable, got {kernel!r}")
        if name in self._kernels and not overwrite:
            raise ValueError(f"kernel {name!r} is already registered (pass overwrite=True)")
        self._kernels[name] = kernel

    def get(self, name: str) -> Callable[..., Any] | None:
        """The kernel registered as ``name``, or ``None``."""
        return self._kernels.get(name)

    def list(self) -> list[str]:
        """The registered names."""
        return list(self._kernels)

    def clear(self) -> None:
        """Forget every registered kernel."""
        self._kernels.clear()


def get_kernel_registry() -> KernelRegistry:
    """The process's :class:`KernelRegistry`."""
    return KernelRegistry()
