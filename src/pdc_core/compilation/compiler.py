"""PyDotCompute's import path ``pydotcompute.compilation.compiler``: compiling kernels.

A thin layer for code written for PyDotCompute. :meth:`KernelCompiler.compile` turns a
function into what runs it, kept in the compiler's table (``options.cache``) under a
hash of its source, signature and options (``source_hash``). A kept result is reused
only for the same function object, never for another function of the same text: two
closures of one function, two lambdas on one line or a function exec'd with other
globals each compile as themselves (the latest is the one kept under the hash).

* ``device="cuda"`` (the default), or another pdc backend's name: a
  :class:`pdc_core.Kernel` -- the body in numba.cuda style, or the CUDA C of a function
  marked with ``cuda_source`` -- pinned to that backend when it is available here, else
  on pdc's default backend (where PyDotCompute fell back to the CPU). It launches as
  ``k[grid, block](...)``, as a ``numba.cuda.jit`` kernel did, and compiles on its first
  launch on each device. ``fastmath``, ``debug`` and ``lineinfo`` go to numba-cuda on the
  cuda backend.
* ``device="cpu"``: the function compiled for the host by numba (``numba.njit``,
  eagerly when a ``signature`` is given), called as the function was. numba is an
  optional dependency (``pip install numba``, or ``pdc-cuda[numba]``): without it this
  raises :class:`~pdc_core.exceptions.KernelCompilationError` saying so.

Every failure is a ``KernelCompilationError`` naming the kernel, its ``cause`` the
error underneath. New code writes ``@pdc_core.kernel`` (or ``kernel.source(src)``) and
launches it: pdc compiles on first launch per device and keeps the result.
"""

from .._publish import publish
from .._pydotcompute.compilation.compiler import (
    CompilationOptions,
    CompiledKernel,
    KernelCompiler,
    compile_kernel,
    get_compiler,
)

__all__ = [
    "CompilationOptions",
    "CompiledKernel",
    "KernelCompiler",
    "compile_kernel",
    "get_compiler",
]

publish(__name__, globals(), __all__)
