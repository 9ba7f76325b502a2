"""Launch geometry: blocks, grids, their limits, and the seeds' automatic block size.

Shared by :mod:`pdc_core.cuda`'s simulator, ``@kernel`` and every backend that launches
kernels (public for them in :mod:`pdc_core.backend`). Knows no backend.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

__all__ = [
    "BLOCK_SIZE_TABLE",
    "DEFAULT_MAX_THREADS_PER_BLOCK",
    "LARGE_BLOCK_SIZE",
    "MAX_BLOCK_DIMS",
    "MAX_GRID_DIMS",
    "Dims",
    "LaunchConfig",
    "auto_block",
    "auto_block_size",
    "check_block",
    "check_grid",
    "dim3",
    "dims",
    "launch_config",
    "problem_size",
]

#: CUDA's per-dimension limits on a block (x, y, z).
MAX_BLOCK_DIMS: Final = (1024, 1024, 64)
#: CUDA's per-dimension limits on a grid (x, y, z).
MAX_GRID_DIMS: Final = (2**31 - 1, 65535, 65535)
#: Threads per block CUDA allows on every device since compute capability 2.0.
DEFAULT_MAX_THREADS_PER_BLOCK: Final = 1024


def dims(value: Any, what: str, *, allow_zero: bool = False) -> tuple[int, ...]:
    """Validate a block, grid or size: an int or a sequence of 1 to 3 ints.

    Raises ``TypeError`` for anything else and ``ValueError`` for a wrong number of
    dimensions or a negative (or, unless ``allow_zero``, zero) extent, naming the value.
    """
    if isinstance(value, bool):
        raise TypeError(f"{what} must be an int or a tuple of up to 3 ints, not {value!r}")
    if isinstance(value, int | np.integer):
        items: tuple[Any, ...] = (value,)
    elif isinstance(value, Sequence) and not isinstance(value, str | bytes):
        items = tuple(value)
    else:
        raise TypeError(f"{what} must be an int or a tuple of up to 3 ints, not {value!r}")
    if not 1 <= len(items) <= 3:
        raise ValueError(f"{what} must have 1 to 3 dimensions, not {len(items)}: {value!r}")
    result = []
    for item in items:
        if isinstance(item, bool):
            raise TypeError(f"{what} {value!r} contains a bool, not an int")
        try:
            extent = operator.index(item)
        except TypeError:
            raise TypeError(f"{what} {value!r} contains {item!r}, which is not an int") from None
        if extent < 0 or (extent == 0 and not allow_zero):
            kind = "negative" if extent < 0 else "zero"
            raise ValueError(f"{what} {value!r} has a {kind} dimension ({extent})")
        result.append(extent)
    return tuple(result)


def dim3(extents: tuple[int, ...]) -> tuple[int, int, int]:
    """``extents`` padded with 1s to three dimensions (x, y, z)."""
    padded = (*extents, 1, 1)
    return (padded[0], padded[1], padded[2])


#: A block, grid or problem size as users give it: an int, or a sequence of 1 to 3
#: ints (x, y, z); :func:`dims` validates one.
Dims = int | Sequence[int]

#: The seeds' table of threads per block, as (largest problem size, threads).
BLOCK_SIZE_TABLE: Final = ((64, 64), (999, 128), (100_000, 256))
#: Threads per block above the table's last size.
LARGE_BLOCK_SIZE: Final = 512


def auto_block_size(size: int) -> int:
    """Threads per block for a problem of ``size`` elements (the seeds' table).

    ========================  ===============
    elements                  threads / block
    ========================  ===============
    0 to 64                   64
    65 to 999 (< 1 K)         128
    1,000 to 100,000          256
    more than 100,000         512
    ========================  ===============

    Small problems get small blocks so that even a few hundred elements spread over
    several multiprocessors; 256 threads (8 warps) is the usual sweet spot; very large
    problems get 512 to halve the number of blocks.
    """
    if isinstance(size, bool) or not isinstance(size, int | np.integer):
        raise TypeError(f"size must be an int, not {size!r}")
    if size < 0:
        raise ValueError(f"size must not be negative, got {size}")
    for largest, threads in BLOCK_SIZE_TABLE:
        if size <= largest:
            return threads
    return LARGE_BLOCK_SIZE


@dataclass(frozen=True)
class LaunchConfig:
    """A grid of blocks and a block of threads, each of 1 to 3 dimensions.

    :func:`launch_config` gives both the same number of dimensions; a launch may give
    them different numbers (``kernel[1, (4, 8)]``), missing dimensions being 1.
    """

    grid: tuple[int, ...]
    block: tuple[int, ...]

    @property
    def ndim(self) -> int:
        """The number of dimensions (1 to 3) of the block."""
        return len(self.block)

    @property
    def threads_per_block(self) -> int:
        """Threads in one block: the product of ``block``."""
        return math.prod(self.block)

    @property
    def blocks(self) -> int:
        """Blocks in the grid: the product of ``grid``."""
        return math.prod(self.grid)

    @property
    def threads(self) -> int:
        """Threads launched: at least the problem size, rounded up to whole blocks."""
        return self.blocks * self.threads_per_block

    @property
    def empty(self) -> bool:
        """True when the problem is empty: nothing is launched."""
        return self.blocks == 0

    @property
    def grid3(self) -> tuple[int, int, int]:
        """``grid`` as three dimensions (missing ones are 1), as CUDA launches take it."""
        return dim3(self.grid)

    @property
    def block3(self) -> tuple[int, int, int]:
        """``block`` as three dimensions (missing ones are 1), as CUDA launches take it."""
        return dim3(self.block)


def problem_size(size: Any) -> tuple[int, ...]:
    """The extents a launch covers: ``size`` as 1 to 3 ints, or the shape of an array
    (anything with a tuple ``shape``: NumPy, CuPy, MLX, a UnifiedBuffer)."""
    if not isinstance(size, type | np.generic) and isinstance(getattr(size, "shape", None), tuple):
        shape = tuple(int(extent) for extent in size.shape)
        if not shape:
            raise ValueError("a 0-dimensional array has no size to launch over; give size=")
        if len(shape) > 3:
            raise ValueError(
                f"an array of shape {shape} has {len(shape)} dimensions; a launch covers at "
                "most 3: give size= or a block"
            )
        return shape
    if isinstance(size, bool) or not isinstance(size, int | np.integer | Sequence):
        raise TypeError(f"size must be an int, a tuple of up to 3 ints or an array, not {size!r}")
    if isinstance(size, str | bytes):
        raise TypeError(f"size must be an int, a tuple of up to 3 ints or an array, not {size!r}")
    return dims(size, "size", allow_zero=True)


def _pow2_floor(value: int) -> int:
    return 1 << (value.bit_length() - 1)


def _pow2_ceil(value: int) -> int:
    return 1 if value <= 1 else 1 << (value - 1).bit_length()


def auto_block(sizes: tuple[int, ...], max_threads: int) -> tuple[int, ...]:
    """The block :func:`launch_config` picks for a problem of ``sizes`` without one."""
    threads = min(auto_block_size(math.prod(sizes)), _pow2_floor(max_threads))
    if len(sizes) == 1:
        return (threads,)
    block = [1] * len(sizes)
    caps = [min(_pow2_ceil(extent), MAX_BLOCK_DIMS[axis]) for axis, extent in enumerate(sizes)]
    product = 1
    grown = True
    while product < threads and grown:
        grown = False
        for axis in range(len(sizes)):
            if product < threads and block[axis] < caps[axis]:
                block[axis] *= 2
                product *= 2
                grown = True
    return tuple(block)


def check_block(block: tuple[int, ...], max_threads: int) -> None:
    """Raise ``ValueError`` naming the block if it exceeds CUDA's per-dimension limits or
    ``max_threads`` threads in all."""
    for axis, (extent, limit) in enumerate(zip(block, MAX_BLOCK_DIMS, strict=False)):
        if extent > limit:
            raise ValueError(
                f"block {block}: dimension {'xyz'[axis]} is {extent}; CUDA allows at most {limit}"
            )
    threads = math.prod(block)
    if threads > max_threads:
        raise ValueError(
            f"block {block} has {threads} threads; the device allows at most {max_threads} "
            "per block"
        )


def check_grid(grid: tuple[int, ...], block: tuple[int, ...]) -> None:
    """Raise ``ValueError`` naming the grid if it exceeds CUDA's grid limits.

    The grid and the block may have different numbers of dimensions (``k[1, (4, 8)]``),
    as in CUDA and numba: missing dimensions are 1.
    """
    for axis, (extent, limit) in enumerate(zip(grid, MAX_GRID_DIMS, strict=False)):
        if extent > limit:
            raise ValueError(
                f"grid {grid}: dimension {'xyz'[axis]} is {extent} blocks, over the limit "
                f"{limit}; use larger blocks or a grid-stride loop"
            )


def launch_config(
    size: Any,
    block: Dims | None = None,
    *,
    max_threads_per_block: int = DEFAULT_MAX_THREADS_PER_BLOCK,
) -> LaunchConfig:
    """The grid and block covering a problem of ``size`` elements.

    ``size`` is an int, a tuple of 1 to 3 ints, or an array (its shape). Without
    ``block``, a 1-D problem gets :func:`auto_block_size` threads; a 2-D or 3-D problem
    gets as many threads in total (by its element count), spread in powers of two over
    its dimensions, x first, never wider than a dimension needs — (16, 16) for
    100 x 100, (32, 16) for 1000 x 1000, (8, 8, 8) for 64 x 64 x 64. The grid is
    ``ceil(size / block)`` per dimension; a zero-sized problem gives an empty grid.

    Raises ``TypeError`` for a size or block that is not made of ints, and
    ``ValueError`` naming the value for a negative size, a zero or negative block
    dimension, more than ``max_threads_per_block`` threads (1024 on CUDA devices), a
    block over CUDA's per-dimension limits (1024, 1024, 64), a block with another
    number of dimensions than the size, or a grid over the device's limits.
    """
    sizes = problem_size(size)
    if isinstance(max_threads_per_block, bool) or not isinstance(max_threads_per_block, int):
        raise TypeError(f"max_threads_per_block must be an int, not {max_threads_per_block!r}")
    if max_threads_per_block < 1:
        raise ValueError(f"max_threads_per_block must be positive, not {max_threads_per_block}")
    if block is None:
        blocks = auto_block(sizes, max_threads_per_block)
    else:
        blocks = dims(block, "block")
        if len(blocks) != len(sizes):
            raise ValueError(
                f"block {blocks} has {len(blocks)} dimension(s) but size {sizes} has {len(sizes)}"
            )
    check_block(blocks, max_threads_per_block)
    grid = tuple(-(-extent // threads) for extent, threads in zip(sizes, blocks, strict=True))
    check_grid(grid, blocks)
    return LaunchConfig(grid=grid, block=blocks)
