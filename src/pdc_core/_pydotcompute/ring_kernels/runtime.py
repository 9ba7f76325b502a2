"""Body of PyDotCompute\'s :mod:`pdc_core.ring_kernels.runtime`; see its docstring."""

from .._seed import RingKernelRuntime

__all__ = ["RingKernelRuntime"]
