"""PyDotCompute's import path ``pydotcompute.ring_kernels.lifecycle``: kernel states.

``KernelContext`` is pdc's :class:`~pdc_core.RingKernelContext`, the ``ctx`` a kernel
function receives, under PyDotCompute's name; it is not generic, so an annotation
``KernelContext[In, Out]`` needs ``from __future__ import annotations``.

Three thin layers translate PyDotCompute's ways to pdc's: :class:`RingKernelConfig`
holds a kernel's configuration, checked by pdc's rules, and makes pdc's
:class:`~pdc_core.RingKernelDefinition` (``config.definition(func)``);
:func:`managed_kernel` runs one kernel in a :class:`~pdc_core.RingKernelRuntime` of its
own for an ``async with`` block; :class:`RingKernel` is PyDotCompute's free-standing
kernel, ``RingKernel(id, func)`` then ``await kernel.launch()``, run by a runtime of its
own in a task of the event loop's own (outside the caller's nurseries: it ends with
``terminate()``, or is cancelled when the run ends). A kernel ``runtime.launch``
returns (a :class:`pdc_core.RingKernel`) counts as an instance of it too. New code
launches kernels in an ``async with RingKernelRuntime()``, whose end stops them.
"""

from .._publish import publish
from .._pydotcompute.ring_kernels.lifecycle import (
    KernelContext,
    KernelState,
    RingKernel,
    RingKernelConfig,
    managed_kernel,
)

__all__ = [
    "KernelContext",
    "KernelState",
    "RingKernel",
    "RingKernelConfig",
    "managed_kernel",
]

publish(__name__, globals(), __all__)
