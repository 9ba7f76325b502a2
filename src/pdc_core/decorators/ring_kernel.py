"""PyDotCompute's import path ``pydotcompute.decorators.ring_kernel``: ``@ring_kernel``.

``get_ring_kernel_meta``, ``is_ring_kernel`` and ``RingKernelBuilder`` are not provided:
``@ring_kernel`` returns a :class:`~pdc_core.RingKernelDefinition` whose attributes are
the configuration.
"""

from .._seed import ring_kernel

__all__ = ["ring_kernel"]
