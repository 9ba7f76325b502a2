"""Vector addition by an actor on the default backend, with UnifiedBuffer.

    python examples/vector_add.py [--n 1000000] [--async-backend trio]

The actor receives pairs of buffers, adds them on the device view (NumPy on the CPU
backend) and replies with a result buffer leased from the memory pool.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import anyio
import numpy as np

from pdc_core import UnifiedBuffer, get_memory_pool, open_nursery


async def add(pair: tuple[UnifiedBuffer, UnifiedBuffer]) -> UnifiedBuffer:
    a, b = pair
    a.sync_to_device()
    b.sync_to_device()
    out = get_memory_pool().acquire(a.shape, dtype=a.dtype)
    np.add(a.host_readonly(), b.host_readonly(), out=out.host)
    return out


async def run(n: int) -> float:
    a = UnifiedBuffer.from_array(np.arange(n, dtype=np.float32))
    b = UnifiedBuffer.from_array(np.full(n, 2.0, dtype=np.float32))
    async with open_nursery() as nursery:
        adder = await nursery.start_actor(add, name="vector_add")
        out = await adder.ask((a, b))
    total = float(out.host_readonly().sum(dtype=np.float64))
    expected = float(np.arange(n, dtype=np.float64).sum() + 2.0 * n)
    assert total == expected, (total, expected)
    get_memory_pool().release(out)
    return total


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--async-backend", choices=("asyncio", "trio"), default="asyncio")
    args = parser.parse_args(argv)
    total = anyio.run(run, args.n, backend=args.async_backend)
    print(f"sum(a + b) over {args.n:,} elements = {total:,.0f} (correct)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
