"""Launch configuration: block and grid sizes computed from the size of the data.

The automatic block size follows the seeds' table (design.md §3.8): fewer than 1 K
elements -> 64 or 128 threads, 1 K to 100 K -> 256, more than 100 K -> 512, always
capped by the kernel's or device's ``maxThreadsPerBlock``. The grid covers every
element: ``ceil(size / block)`` per dimension.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import SupportsIndex

__all__ = ["LaunchConfig", "auto_block_size", "launch_config"]

#: CUDA's limits on grid dimensions (x, y, z) for compute capability 3.0 and later.
MAX_GRID = (2**31 - 1, 65535, 65535)
#: CUDA's limits on block dimensions (x, y, z).
MAX_BLOCK = (1024, 1024, 64)

Dims = SupportsIndex | Sequence[SupportsIndex]


@dataclass(frozen=True)
class LaunchConfig:
    """A grid and a block, both as 3-tuples, ready for ``RawKernel(grid, block, args)``."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]

    @property
    def threads(self) -> int:
        """Total threads launched (at least the number of elements)."""
        g, b = self.grid, self.block
        return g[0] * g[1] * g[2] * b[0] * b[1] * b[2]

    @property
    def empty(self) -> bool:
        """True when there is nothing to launch (a zero-sized problem)."""
        return 0 in self.grid


def auto_block_size(size: int, max_threads_per_block: int = 1024) -> int:
    """Threads per block for a 1-D problem of ``size`` elements (the seeds' table)."""
    if size < 0:
        raise ValueError(f"a problem size cannot be negative, got {size}")
    if size <= 64:
        block = 64
    elif size < 1_000:
        block = 128
    elif size <= 100_000:
        block = 256
    else:
        block = 512
    return max(1, min(block, max_threads_per_block))


def _dims(value: Dims, what: str) -> tuple[int, ...]:
    items: Sequence[SupportsIndex]
    if isinstance(value, SupportsIndex) and not isinstance(value, bool):
        items = (value,)
    elif isinstance(value, Sequence) and not isinstance(value, str | bytes):
        items = value
    else:
        raise TypeError(f"{what} must be an int or a tuple of up to 3 ints, not {value!r}")
    if not 1 <= len(items) <= 3:
        raise ValueError(f"{what} must have 1 to 3 dimensions, got {len(items)}: {value!r}")
    dims = []
    for item in items:
        if isinstance(item, bool):
            raise TypeError(f"{what} {value!r} contains a bool, not an int")
        try:
            dims.append(operator.index(item))
        except TypeError:
            raise TypeError(f"{what} {value!r} contains {item!r}, which is not an int") from None
    return tuple(dims)


def _pad3(dims: tuple[int, ...]) -> tuple[int, int, int]:
    padded = (*dims, 1, 1)
    return (padded[0], padded[1], padded[2])


def launch_config(
    size: Dims,
    block: Dims | None = None,
    *,
    max_threads_per_block: int = 1024,
    max_grid: tuple[int, int, int] = MAX_GRID,
) -> LaunchConfig:
    """The grid and block that cover ``size`` elements (1 to 3 dimensions).

    Without ``block`` a 1-D block is chosen by :func:`auto_block_size`; for 2-D and
    3-D problems without ``block`` the x dimension gets it and the others get 1.
    Raises ``ValueError`` naming the problem for negative sizes, empty or oversized
    blocks (more than ``max_threads_per_block`` threads, or beyond CUDA's per-dimension
    limits) and grids larger than the device allows.
    """
    sizes = _dims(size, "size")
    for extent in sizes:
        if extent < 0:
            raise ValueError(f"size {sizes} has a negative dimension {extent}")
    if block is None:
        blocks: tuple[int, ...] = (auto_block_size(sizes[0], max_threads_per_block),) + (1,) * (
            len(sizes) - 1
        )
    else:
        blocks = _dims(block, "block")
        if len(blocks) != len(sizes):
            raise ValueError(
                f"block {blocks} has {len(blocks)} dimension(s) but size {sizes} has {len(sizes)}"
            )
    threads = 1
    for axis, (extent, limit) in enumerate(zip(blocks, MAX_BLOCK, strict=False)):
        if extent <= 0:
            raise ValueError(f"block {blocks} has a non-positive dimension {extent}")
        if extent > limit:
            raise ValueError(
                f"block {blocks}: dimension {'xyz'[axis]} is {extent}, CUDA allows at most {limit}"
            )
        threads *= extent
    if threads > max_threads_per_block:
        raise ValueError(
            f"block {blocks} has {threads} threads; this kernel on this device allows at most "
            f"{max_threads_per_block} per block"
        )
    grid = tuple(-(-extent // b) for extent, b in zip(sizes, blocks, strict=True))
    for axis, (extent, limit) in enumerate(zip(grid, max_grid, strict=False)):
        if extent > limit:
            raise ValueError(
                f"size {sizes} needs a grid of {grid} blocks: dimension {'xyz'[axis]} exceeds "
                f"the device limit {limit}; use a larger block or a grid-stride loop"
            )
    return LaunchConfig(grid=_pad3(grid), block=_pad3(blocks))
