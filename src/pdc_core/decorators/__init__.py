"""PyDotCompute's import path ``pydotcompute.decorators``: ``@kernel``, ``@ring_kernel``.

``kernel`` and ``gpu_kernel`` are pdc's ``@kernel``; ``ring_kernel`` is pdc's
``@ring_kernel``. ``validate_message`` and ``validate_config`` are the thin checks of
:mod:`pdc_core.decorators.validators` (pdc checks messages and configurations itself,
raising ``ValueError`` or ``TypeError``).
"""

# From the submodules, so that ``kernel`` and ``ring_kernel`` here are the decorators
# rather than the submodules of the same names (as in PyDotCompute).
from .._publish import publish
from .kernel import gpu_kernel, kernel
from .ring_kernel import ring_kernel
from .validators import validate_config, validate_message

__all__ = ["gpu_kernel", "kernel", "ring_kernel", "validate_config", "validate_message"]

publish(__name__, globals(), __all__)
