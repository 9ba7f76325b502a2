"""PyDotCompute's import path ``pydotcompute.backends``: the backend base class.

pdc's :class:`~pdc_core.Backend` is a different contract (docs/plugin-guide.md): a
PyDotCompute backend subclass has to be ported. ``BackendType`` names pdc's backends,
and ``CPUBackend`` is a thin layer with PyDotCompute's methods over
``pdc_core.get_backend("cpu")``.
"""

from .._publish import publish
from .base import Backend, BackendType
from .cpu import CPUBackend

__all__ = ["Backend", "BackendType", "CPUBackend"]

publish(__name__, globals(), __all__)
