"""pdc-cuda's host build as the ``cuda`` backend: the plugin of ``gpu_figures.sh``'s dry run.

``PDC_FIGURES_HOST=1 bash benchmarks/gpu_figures.sh`` names this module as pdc-cuda's
entry point in the script's shim (the name ``cuda`` belongs to pdc-cuda), so that
``pdc bench --backend cuda`` runs the same suite on ``pdc_cuda.testing.HostCudaBackend``:
the ring kernel on CPU threads, two per block (a small machine's cores), with pdc-cuda's
own benchmark paths (the mapped-memory floor; the host build has no launch paths). Its
times say nothing about a GPU: the dry run shows only that every stage runs.
"""

from __future__ import annotations

from collections.abc import Callable

from pdc_cuda import pdc_register_benchmarks as pdc_register_benchmarks
from pdc_cuda.testing import HostCudaBackend

from pdc_core.backend import Backend, LazyBackend, hookimpl


class FiguresHostBackend(HostCudaBackend):
    """The host build with two threads per block, built by the registry (``device=N``)."""

    def __init__(self, device: int = 0) -> None:
        super().__init__(max_threads_per_block=2, device=device)


@hookimpl
def pdc_register_backends(register: Callable[[type[Backend] | LazyBackend], None]) -> None:
    """Registers :class:`FiguresHostBackend` (backend name ``cuda``)."""
    register(FiguresHostBackend)
