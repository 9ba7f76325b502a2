"""PyDotCompute's import path ``pydotcompute.ring_kernels.lifecycle``: kernel states.

``KernelContext`` is pdc's :class:`~pdc_core.RingKernelContext`, the ``ctx`` a kernel
function receives, under PyDotCompute's name; it is not generic, so an annotation
``KernelContext[In, Out]`` needs ``from __future__ import annotations``.
``RingKernelConfig`` (use ``@ring_kernel``'s keywords) and ``managed_kernel`` (use a
``RingKernelRuntime``) are not provided.
"""

from .._seed import KernelState, RingKernel, RingKernelContext

#: PyDotCompute's name for :class:`~pdc_core.RingKernelContext`.
KernelContext = RingKernelContext

__all__ = ["KernelContext", "KernelState", "RingKernel"]
