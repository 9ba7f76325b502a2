"""Launch configuration on CUDA: the core's, with this device's and kernel's limits.

The automatic block size and the grid are :func:`pdc_core.launch_config`'s (the seeds'
table of design.md §3.8, spread over 2-D and 3-D problems); this module only supplies
the CUDA limits (the device's ``maxThreadsPerBlock``, the compiled kernel's own
``max_threads_per_block``) and turns explicit grids and blocks into the (x, y, z)
triples ``cupy.RawKernel`` takes. :class:`~pdc_core.LaunchConfig`,
:func:`~pdc_core.auto_block_size` and :func:`~pdc_core.launch_config` are re-exported
from ``pdc_cuda`` unchanged.
"""

from __future__ import annotations

from typing import Any

from pdc_core import LaunchConfig, auto_block_size, launch_config
from pdc_core.backend import Dims, check_block, check_grid, dim3, dims

__all__ = ["Dims", "LaunchConfig", "auto_block_size", "explicit_config", "launch_config"]


def explicit_config(
    grid: Any, block: Any, *, max_threads_per_block: int = 1024
) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """Validate an explicit ``grid`` and ``block`` and return them as (x, y, z) triples.

    A grid may have a zero extent (nothing is launched); a block may not. Raises
    ``TypeError``/``ValueError`` naming the value, as :func:`pdc_core.launch_config`
    does: blocks over CUDA's per-dimension limits or ``max_threads_per_block``, grids
    over CUDA's limits, mismatched numbers of dimensions.
    """
    grid_dims = dims(grid, "grid", allow_zero=True)
    block_dims = dims(block, "block")
    check_block(block_dims, max_threads_per_block)
    if len(grid_dims) != len(block_dims):
        # RawKernel takes triples: a 1-D grid with a 2-D block is legal CUDA.
        grid_dims = dim3(grid_dims)
        block_dims = dim3(block_dims)
    check_grid(grid_dims, block_dims)
    return dim3(grid_dims), dim3(block_dims)
