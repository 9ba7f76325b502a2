"""Exceptions specific to the CUDA backend (all derive from pdc's own hierarchy)."""

from __future__ import annotations

from collections.abc import Sequence

from pdc_core import BackendError

__all__ = ["CudaCompileError", "CudaContextError", "NvrtcUnavailable", "ResidentKernelBlocks"]


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
    wheel) or a CUDA 12 toolkit; with CUDA 13, ``pip install 'cuda-toolkit[nvrtc]==13.*'``
    or a CUDA 13 toolkit.
    """


class CudaContextError(BackendError):
    """Something may not cross between the primary context and a resident kernel's own
    context (a device array of the primary context passed to a resident kernel, ring
    memory that is not portable), or the kernel's context could not be made."""


class ResidentKernelBlocks(BackendError):
    """A pdc operation would wait for a kernel resident in the primary context (the
    ``"shared"`` placement), so it is refused instead of hanging. The message names the
    resident kernels and the placement that avoids it."""


# Raised to users: tracebacks and reprs name pdc_cuda.CudaCompileError, not this module
# (as trio and anyio do for theirs).
for _error in (CudaCompileError, CudaContextError, NvrtcUnavailable, ResidentKernelBlocks):
    _error.__module__ = "pdc_cuda"
