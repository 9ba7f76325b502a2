"""PyDotCompute's import path ``pydotcompute.backends.base``: the backend base class.

pdc's :class:`~pdc_core.Backend` is a different contract (docs/plugin-guide.md): a
PyDotCompute backend subclass has to be ported. ``BackendType``,
``KernelExecutionResult`` and ``BackendArray`` are not provided.
"""

from .._backend._contract import Backend

__all__ = ["Backend"]
