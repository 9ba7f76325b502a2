"""Exceptions specific to the CUDA backend (all derive from pdc's own hierarchy)."""

from __future__ import annotations

from collections.abc import Sequence

from pdc_core import BackendError

__all__ = ["CudaCompileError", "NvrtcUnavailable"]


class CudaCompileError(BackendError, ValueError):
    """CUDA C source failed to compile; the message carries the compiler's log.

    Attributes: ``log`` (NVRTC's log, verbatim), ``source`` (what was compiled, after
    pdc's template was applied), ``options`` (the compiler options) and ``name`` (the
    kernel asked for).
    """

    def __init__(
        self, name: str, log: str, source: str, options: Sequence[str], what: str = ""
    ) -> None:
        self.name = name
        self.log = log.strip()
        self.source = source
        self.options = tuple(options)
        subject = what or f"kernel {name!r}"
        super().__init__(
            f"{subject} failed to compile with NVRTC (options: {' '.join(self.options)}):\n"
            f"{self.log or '(the compiler printed no log)'}"
        )


class NvrtcUnavailable(BackendError, RuntimeError):
    """No usable NVRTC (the CUDA runtime compiler) is installed.

    Install it with ``pip install 'pdc-cuda[nvrtc]'`` (the ``nvidia-cuda-nvrtc-cu12``
    wheel) or a CUDA 12 toolkit.
    """


# Raised to users: tracebacks and reprs name pdc_cuda.CudaCompileError, not this module
# (as trio and anyio do for theirs).
for _error in (CudaCompileError, NvrtcUnavailable):
    _error.__module__ = "pdc_cuda"
