"""PyDotCompute's import path ``pydotcompute.compilation``: the kernel compiler and cache.

Thin layers for code written for PyDotCompute (see :mod:`pdc_core.compilation.compiler`
and :mod:`pdc_core.compilation.cache`). New code writes ``@pdc_core.kernel``: a kernel
compiles on its first launch on each device and keeps the result.
"""

from .._publish import publish
from .cache import KernelCache
from .compiler import KernelCompiler

__all__ = ["KernelCache", "KernelCompiler"]

publish(__name__, globals(), __all__)
