"""Body of PyDotCompute\'s :mod:`pdc_core.compilation.compiler`; see its docstring."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pdc_core import Kernel, available_backends

from ..exceptions import KernelCompilationError

__all__ = [
    "CompilationOptions",
    "CompiledKernel",
    "KernelCompiler",
    "compile_kernel",
    "get_compiler",
]


@dataclass
class CompilationOptions:
    """How :class:`KernelCompiler` compiles: ``device`` is ``"cpu"`` or a pdc backend's
    name; ``fastmath``, ``debug`` and ``lineinfo`` are numba's flags; ``opt_level`` is
    kept for PyDotCompute's code (numba chooses its own); ``cache`` keeps the result in
    the compiler's table."""

    device: str = "cuda"
    fastmath: bool = True
    debug: bool = False
    lineinfo: bool = False
    opt_level: int = 3
    cache: bool = True


@dataclass
class CompiledKernel:
    """A compiled kernel (``kernel``: a :class:`pdc_core.Kernel` or a numba function)
    and how it was made; ``compile_time_ms`` is the time :meth:`KernelCompiler.compile`
    took."""

    kernel: Callable[..., Any]
    name: str
    source_hash: str
    signature: str | None
    options: CompilationOptions
    compile_time_ms: float = 0.0
    ptx: str | None = None
    #: The function compiled: a kept result is reused for this function only.
    function: Callable[..., Any] | None = field(default=None, repr=False, compare=False)


def _backend_names() -> dict[str, bool]:
    """pdc's registered backends: name -> available here."""
    return {info.name: info.availability.available for info in available_backends()}


def _numba() -> Any:
    """numba, or a clear error when it is not installed."""
    try:
        return importlib.import_module("numba")
    except ImportError as error:
        raise ImportError(
            "compiling for device='cpu' needs numba: pip install numba "
            "(or pdc_core.kernel, which runs everywhere without it)"
        ) from error


class KernelCompiler:
    """Compiles functions into kernels (see the module documentation) and keeps them."""

    def __init__(self, options: CompilationOptions | None = None) -> None:
        self._options = options or CompilationOptions()
        self._compiled_cache: dict[str, CompiledKernel] = {}

    @property
    def cuda_available(self) -> bool:
        """Whether pdc's cuda backend is available here."""
        return _backend_names().get("cuda", False)

    @property
    def numba_available(self) -> bool:
        """Whether numba is installed (``device="cpu"`` needs it)."""
        return importlib.util.find_spec("numba") is not None

    def compile(
        self,
        func: Callable[..., Any],
        *,
        signature: str | None = None,
        name: str | None = None,
        options: CompilationOptions | None = None,
    ) -> CompiledKernel:
        """``func`` compiled under ``options`` (the compiler's when ``None``), or the
        same :class:`CompiledKernel` as before for this function, signature and options
        when ``options.cache``. ``KernelCompilationError`` when it fails."""
        opts = options or self._options
        kernel_name = name or str(getattr(func, "__name__", "kernel"))
        source_hash = self._get_source_hash(func, signature, opts)
        kept = self._compiled_cache.get(source_hash)
        if opts.cache and kept is not None and kept.function is func:
            return kept
        started = time.perf_counter()
        try:
            compiled = self._build(func, signature, opts)
        except Exception as error:
            raise KernelCompilationError(kernel_name, error) from error
        result = CompiledKernel(
            kernel=compiled,
            name=kernel_name,
            source_hash=source_hash,
            signature=signature,
            options=opts,
            compile_time_ms=(time.perf_counter() - started) * 1e3,
            function=func,
        )
        if opts.cache:
            self._compiled_cache[source_hash] = result
        return result

    @staticmethod
    def _build(
        func: Callable[..., Any], signature: str | None, opts: CompilationOptions
    ) -> Callable[..., Any]:
        if opts.device == "cpu":
            flags = {"fastmath": opts.fastmath, "debug": opts.debug}
            numba = _numba()
            jit = numba.njit(signature, **flags) if signature else numba.njit(**flags)
            jitted: Callable[..., Any] = jit(func)
            return jitted
        backends = _backend_names()
        if opts.device not in backends:
            choices = ", ".join(sorted({"cpu", *backends}))
            raise ValueError(f"unknown device {opts.device!r}: one of {choices}")
        # Pinned where it can run; else pdc's default backend (PyDotCompute fell back
        # to the CPU when CUDA was missing).
        backend = opts.device if backends[opts.device] else None
        source = getattr(func, "__cuda_source__", None)
        if source is not None:
            return Kernel(source=source, name=getattr(func, "__name__", None), backend=backend)
        numba_flags = {"fastmath": opts.fastmath, "debug": opts.debug, "lineinfo": opts.lineinfo}
        return Kernel(func, backend=backend, options=numba_flags if backend == "cuda" else None)

    def _get_source_hash(
        self, func: Callable[..., Any], signature: str | None, options: CompilationOptions
    ) -> str:
        """16 hex digits of a hash of ``func``'s source (its qualified name when the
        source cannot be read), the signature and the options that change the code."""
        try:
            source = inspect.getsource(func)
        except (OSError, TypeError):
            source = getattr(func, "__qualname__", repr(func))
        key = (
            source,
            getattr(func, "__cuda_source__", None),
            signature,
            options.device,
            options.fastmath,
            options.debug,
            options.lineinfo,
            options.opt_level,
        )
        return hashlib.sha256(repr(key).encode()).hexdigest()[:16]

    def get_cached_kernel(self, source_hash: str) -> CompiledKernel | None:
        """The kernel last kept under that hash, or ``None``."""
        return self._compiled_cache.get(source_hash)

    def clear_cache(self) -> int:
        """Forget every kept kernel; how many there were."""
        count = len(self._compiled_cache)
        self._compiled_cache.clear()
        return count

    def get_cache_stats(self) -> dict[str, int]:
        """``{"cached_kernels": n}``."""
        return {"cached_kernels": len(self._compiled_cache)}

    def __repr__(self) -> str:
        return (
            f"KernelCompiler(cuda={self.cuda_available}, numba={self.numba_available}, "
            f"cached={len(self._compiled_cache)})"
        )


#: The compiler :func:`get_compiler` returns (made at first use).
_global_compiler: KernelCompiler | None = None


def get_compiler() -> KernelCompiler:
    """The process's :class:`KernelCompiler`."""
    global _global_compiler
    if _global_compiler is None:
        _global_compiler = KernelCompiler()
    return _global_compiler


def compile_kernel(
    func: Callable[..., Any], *, signature: str | None = None, **options: Any
) -> CompiledKernel:
    """``get_compiler().compile(func, ...)`` with ``CompilationOptions(**options)``
    (the compiler's own when none are given)."""
    opts = CompilationOptions(**options) if options else None
    return get_compiler().compile(func, signature=signature, options=opts)
