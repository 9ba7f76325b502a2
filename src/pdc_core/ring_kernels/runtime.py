"""PyDotCompute's import path ``pydotcompute.ring_kernels.runtime``: the runtime.

``register_ring_kernel`` (use ``@ring_kernel``, which registers) and
``get_registered_kernel`` (keep the definition ``@ring_kernel`` returns) are not
provided.
"""

from .._publish import publish
from .._pydotcompute.ring_kernels.runtime import (
    RingKernelRuntime,
)

__all__ = [
    "RingKernelRuntime",
]

publish(__name__, globals(), __all__)
