"""Cost of UnifiedBuffer synchronization on the metal backend (MLX) vs the cpu backend.

Run from the repository root, with pdc-cpu and pdc-metal installed::

    python benchmarks/metal_sync.py            # sizes 4 KiB, 1 MiB, 64 MiB
    python benchmarks/metal_sync.py --quick    # fewer repetitions

Everything is measured in one run, side by side, and printed as per-call medians
(microseconds) with the metal/cpu ratio. What is measured, for each buffer size:

* ``sync_to_device`` / ``sync_to_host`` after a host write: what the seeds' lazy-sync
  API costs. Both backends have unified memory, so neither copies.
* ``.device`` access: the device view (the host array itself on cpu; a fresh MLX array
  over the same bytes on metal).
* ``to_device`` + ``to_host``: an explicit copy in and out, the cost a non-unified
  design would pay per message.
* ``kernel + host read``: ``y = x * 0.5 + 1`` written into the buffer, then a host read
  (``metal.run(fn, buf, out=buf)`` vs NumPy ufuncs with ``out=``).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import pdc_core
from pdc_core import Backend, UnifiedBuffer

SIZES = {"4 KiB": 1 << 10, "1 MiB": 1 << 18, "64 MiB": 1 << 24}  # float32 elements


def per_call_us(fn: Callable[[], Any], repeats: int, inner: int) -> float:
    """Median over ``repeats`` of the mean time of ``inner`` calls, in microseconds."""
    fn()  # warm up
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        samples.append((time.perf_counter() - start) / inner)
    return statistics.median(samples) * 1e6


def cases(backend: Backend, n: int) -> dict[str, Callable[[], Any]]:
    buf = UnifiedBuffer((n,), dtype=np.float32, backend=backend)
    buf.host[:] = 1.0
    host = buf.host
    outside = np.ones(n, dtype=np.float32)

    def sync_to_device() -> None:
        buf.host[0] = 2.0
        buf.sync_to_device()

    def sync_to_host() -> None:
        buf.host[0] = 2.0
        buf.sync_to_host()

    def device_access() -> Any:
        return buf.device

    def copies() -> Any:
        return backend.to_host(backend.to_device(outside))

    if backend.name == "metal":
        run = backend.run  # type: ignore[attr-defined]

        def kernel() -> float:
            run(lambda x: x * 0.5 + 1, buf, out=buf)
            return float(buf.host[0])
    else:

        def kernel() -> float:
            device = buf.device
            np.multiply(device, 0.5, out=device)
            np.add(device, 1, out=device)
            return float(host[0])

    return {
        "sync_to_device": sync_to_device,
        "sync_to_host": sync_to_host,
        ".device access": device_access,
        "to_device + to_host": copies,
        "kernel + host read": kernel,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args()
    repeats = 3 if args.quick else 7

    cpu = pdc_core.get_backend("cpu")
    metal = pdc_core.get_backend("metal")
    import mlx.core as mx

    print(f"python {platform.python_version()}, numpy {np.__version__}, mlx {mx.__version__}")
    print(
        f"machine: {platform.machine()}, {platform.system()}; "
        f"metal device: {metal.device_info.name}"
    )
    print(f"{'size':>7}  {'operation':<20} {'cpu us':>10} {'metal us':>10} {'metal/cpu':>9}")
    for label, n in SIZES.items():
        inner = max(1, min(2000, (1 << 22) // n))
        cpu_cases, metal_cases = cases(cpu, n), cases(metal, n)
        for name in cpu_cases:
            t_cpu = per_call_us(cpu_cases[name], repeats, inner)
            t_metal = per_call_us(metal_cases[name], repeats, inner)
            print(f"{label:>7}  {name:<20} {t_cpu:10.2f} {t_metal:10.2f} {t_metal / t_cpu:9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
