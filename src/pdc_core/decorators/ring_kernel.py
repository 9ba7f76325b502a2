"""PyDotCompute's import path ``pydotcompute.decorators.ring_kernel``: ``@ring_kernel``.

``@ring_kernel`` is pdc's: it returns a :class:`~pdc_core.RingKernelDefinition` whose
attributes are the configuration. Three thin helpers read and make definitions under
PyDotCompute's names: :func:`is_ring_kernel`, :func:`get_ring_kernel_meta` (the
definition's configuration as PyDotCompute's metadata dictionary) and
:class:`RingKernelBuilder` (its ``build()`` is ``@ring_kernel`` with the options set).
"""

from .._publish import publish
from .._pydotcompute.decorators.ring_kernel import (
    RingKernelBuilder,
    get_ring_kernel_meta,
    is_ring_kernel,
    ring_kernel,
)

__all__ = [
    "RingKernelBuilder",
    "get_ring_kernel_meta",
    "is_ring_kernel",
    "ring_kernel",
]

publish(__name__, globals(), __all__)
