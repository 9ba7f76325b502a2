"""PyDotCompute's import path ``pydotcompute.decorators``: ``@kernel`` and ``@ring_kernel``.

``gpu_kernel`` (use ``@kernel``), ``validate_message`` and ``validate_config`` (pdc
checks messages and configurations itself, raising ``ValueError`` or ``TypeError``) are
not provided.
"""

# From the submodules, so that ``kernel`` and ``ring_kernel`` here are the decorators
# rather than the submodules of the same names (as in PyDotCompute).
from .kernel import kernel
from .ring_kernel import ring_kernel

__all__ = ["kernel", "ring_kernel"]
