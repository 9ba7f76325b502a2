"""PyDotCompute's import path ``pydotcompute.backends``: the backend base class.

pdc's :class:`~pdc_core.Backend` is a different contract (docs/plugin-guide.md): a
PyDotCompute backend subclass has to be ported. ``BackendType`` (backends are named by
strings) and ``CPUBackend`` (use ``pdc_core.get_backend("cpu")``) are not provided.
"""

from .base import Backend

__all__ = ["Backend"]
