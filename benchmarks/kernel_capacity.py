"""How a persistent kernel's ring capacity and batch size set its throughput, and its memory.

Run from the repository root (pdc-core and pdc-cpu installed)::

    python benchmarks/kernel_capacity.py             # 5 rounds, asyncio and trio
    python benchmarks/kernel_capacity.py --quick     # 3 rounds, asyncio only

The kernel is the benchmark kernel of ``pdc bench`` (records ``(id: u8, x: f8)`` in,
``(id: u8, y: f8)`` out, ``y = 2 x``, one NumPy pass per batch) on the cpu backend.
For each ring ``capacity`` (and ``max_batch``, the most requests one body call gets:
by default the capacity), one ``session.request_batch`` of ``--records`` records
(100,000 by default) is timed in a fresh session, and one-record ``session.request``
round trips (median of ``--trips``) show that capacity costs a lone request nothing.
Contenders run in a rotating order, round by round, in fresh event loops.

The memory column is what a ring region of that capacity takes (the control block,
the input ring with the cuda backend's sequenced slots, and the output ring): on a GPU
it is pinned, host-mapped memory, allocated for the kernel's whole life. It grows with
``capacity x (request size + reply size)``; the records here are 16 bytes.

Ratios are per round against the default (``persistent_kernel``'s ``capacity``), so
they hold on any machine; absolute rates depend on its load.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import anyio
import numpy as np

from pdc_core import PersistentKernel, open_persistent_kernel
from pdc_core._backend._persistent_kernel import DEFAULT_CAPACITY
from pdc_core._cli._bench_paths import REP, REQ, double, rotated
from pdc_core._cli._bench_stats import gc_paused, print_header, table
from pdc_core.backend import RingLayout

#: (capacity, max_batch) pairs measured; ``None``: max_batch defaults to the capacity.
SETTINGS: list[tuple[int, int | None]] = [
    (64, None),
    (256, None),
    (1024, None),
    (4096, None),
    (16384, None),
    (16384, 1024),
    (65536, None),
]


def _label(capacity: int, max_batch: int | None) -> str:
    return f"{capacity}" + (f", max_batch {max_batch}" if max_batch else "")


def _records(count: int) -> Any:
    records = np.zeros(count, REQ)
    records["id"] = np.arange(count)
    records["x"] = np.arange(count) * 0.5
    return records


async def _measure(
    capacity: int, max_batch: int | None, records: Any, trips: int
) -> tuple[float, float]:
    """(records per second through request_batch, median round trip in seconds)."""
    kernel = PersistentKernel("double", REQ, REP, capacity=capacity, max_batch=max_batch)
    kernel.add_body("cpu", double)
    async with open_persistent_kernel(kernel, "cpu") as session:
        await session.request_batch(records[:capacity])  # warm up
        with gc_paused():
            start = time.perf_counter()
            replies = await session.request_batch(records)
            elapsed = time.perf_counter() - start
        if not np.array_equal(replies["y"], records["x"] * 2.0):
            raise AssertionError("wrong replies")
        one = records[:1]
        samples = []
        for _ in range(trips):
            begin = time.perf_counter()
            await session.request(one)
            samples.append(time.perf_counter() - begin)
    return len(records) / elapsed, statistics.median(samples)


def _memory(capacity: int) -> int:
    return RingLayout(REQ, REP, capacity, sequenced_input=True).total_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds, asyncio only")
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--trips", type=int, default=200)
    args = parser.parse_args()
    rounds = args.rounds or (3 if args.quick else 5)
    loops = ("asyncio",) if args.quick else ("asyncio", "trio")
    print_header(
        "Persistent kernel: ring capacity and batch size (cpu backend)",
        ["pdc-core", "pdc-cpu", "numpy", "anyio", "trio"],
        f"Rounds: {rounds}; {args.records:,} records per request_batch; "
        f"{args.trips} round trips; default capacity {DEFAULT_CAPACITY}.",
    )
    records = _records(args.records)
    default = (DEFAULT_CAPACITY, None)
    for loop in loops:
        rates: dict[tuple[int, int | None], list[float]] = {s: [] for s in SETTINGS}
        trips: dict[tuple[int, int | None], list[float]] = {s: [] for s in SETTINGS}
        ratios: dict[tuple[int, int | None], list[float]] = {s: [] for s in SETTINGS}
        for index in range(rounds):
            this_round: dict[tuple[int, int | None], float] = {}
            for setting in rotated(SETTINGS, index):
                rate, trip = anyio.run(
                    _measure, *setting, records, args.trips, backend=loop
                )  # fmt: skip
                rates[setting].append(rate)
                trips[setting].append(trip)
                this_round[setting] = rate
            if default in this_round:
                for setting, rate in this_round.items():
                    ratios[setting].append(rate / this_round[default])
        rows = [
            [
                _label(*setting),
                f"{statistics.median(rates[setting]) / 1e6:.2f}",
                f"{statistics.median(ratios[setting]):.2f}" if ratios[setting] else "-",
                f"{statistics.median(trips[setting]) * 1e6:.0f}",
                f"{_memory(setting[0]) / 1024:,.0f}",
            ]
            for setting in SETTINGS
        ]
        print(f"## {loop}")
        print()
        print(
            table(
                [
                    "capacity",
                    "M records/s (request_batch)",
                    "vs default",
                    "round trip (us)",
                    "ring memory (KiB)",
                ],
                rows,
                "lrrrr",
            )
        )
        print()


if __name__ == "__main__":
    main()
