"""A CPU persistent kernel against the floors a worker thread written by hand reaches.

Run from the repository root (pdc-core and pdc-cpu installed)::

    python benchmarks/persistent_floor.py             # 5 rounds, asyncio and trio
    python benchmarks/persistent_floor.py --quick     # 3 rounds, fewer records
    python benchmarks/persistent_floor.py --markdown  # tables for docs/benchmarks.md

The work is the benchmark kernel's everywhere: records ``(id: u8, x: f8)`` become
``(id: u8, y: f8)`` with ``y = 2 x``, one NumPy pass per chunk (``double``).

Batched throughput, 200,000 records in 1024-record chunks:

* **floor, all queued** -- a hand-written worker thread: the host puts every chunk on a
  ``queue.SimpleQueue`` at once; the worker takes them one by one, computes, and hands
  each result back with the loop's thread-safe call (``call_soon_threadsafe`` /
  trio's ``run_sync_soon``) into a queue the host reads.
* **floor, one in flight** -- the same worker, the host waiting for each chunk's result
  before it sends the next.
* **NumPy in line** -- ``double`` called on each chunk on the event loop's thread: the
  physical limit of this work in Python, no thread at all.
* **pdc request_batch** -- ``session.request_batch(records)`` on the cpu backend's
  persistent kernel, for ring capacities of 1024 (one chunk in flight) and 16384 (16
  chunks of ``max_batch=1024``).

Round trip, one record:

* **floor, thread hand-off** -- the same worker thread fed one record through a
  ``SimpleQueue``, its reply handed back with the thread-safe call.
* **pdc request** -- ``await session.request(record)``, the caller sleeping in the event
  loop until the kernel signals (the default), and with ``wait="spin"`` (the caller
  blocks outside the loop on the worker's signal for up to 100 us first).

Rounds are interleaved in a rotating order, each contender in a fresh event loop with
the collector paused. Tables show medians over rounds and, for pdc, the median (and
range) of its ratio to the floor measured in the same round.
"""

from __future__ import annotations

import argparse
import asyncio
import queue
import statistics
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import numpy as np
import numpy.typing as npt

from pdc_core import PersistentKernel, open_persistent_kernel
from pdc_core._cli import _bench_paths as paths
from pdc_core._cli._bench_stats import command_line, environment, table

CHUNK = 1024
LIBRARIES = ("asyncio", "trio")

Deliver = Callable[[Callable[..., object], Any], object]


def _threadsafe_call() -> Deliver:
    """How a thread hands a call to the running event loop, the obvious way."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        import trio

        token = trio.lowlevel.current_trio_token()
        return lambda fn, arg: token.run_sync_soon(fn, arg)
    return lambda fn, arg: loop.call_soon_threadsafe(fn, arg)


class _Worker:
    """A worker thread that runs ``double`` on each item of its ``SimpleQueue`` and
    hands the result to the event loop through ``deliver``."""

    def __init__(self, deliver: Deliver, sink: Callable[[Any], object]) -> None:
        self.inbox: queue.SimpleQueue[npt.NDArray[Any] | None] = queue.SimpleQueue()
        self._deliver = deliver
        self._sink = sink
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        inbox, deliver, sink, double = self.inbox, self._deliver, self._sink, paths.double
        while (chunk := inbox.get()) is not None:
            deliver(sink, double(chunk))

    def close(self) -> None:
        self.inbox.put(None)
        self._thread.join()


def _check(replies: npt.NDArray[Any], records: npt.NDArray[Any]) -> None:
    if len(replies) != len(records) or replies["id"][-1] != records["id"][-1]:
        raise RuntimeError("wrong replies")
    if float(replies["y"][-1]) != float(records["x"][-1]) * 2:
        raise RuntimeError("wrong replies")


def _chunks(records: npt.NDArray[Any]) -> list[npt.NDArray[Any]]:
    return [records[i : i + CHUNK] for i in range(0, len(records), CHUNK)]


# -- batched --------------------------------------------------------------------------


async def _worker_batched(records: npt.NDArray[Any], in_flight: int | None) -> float:
    send, receive = anyio.create_memory_object_stream[npt.NDArray[Any]](len(records))
    worker = _Worker(_threadsafe_call(), send.send_nowait)
    chunks = _chunks(records)
    try:
        t0 = time.perf_counter()
        replies: list[npt.NDArray[Any]] = []
        if in_flight is None:
            for chunk in chunks:
                worker.inbox.put(chunk)
            for _ in chunks:
                replies.append(await receive.receive())
        else:
            for chunk in chunks:
                worker.inbox.put(chunk)
                replies.append(await receive.receive())
        result = np.concatenate(replies)
        elapsed = time.perf_counter() - t0
    finally:
        worker.close()
    _check(result, records)
    return len(records) / elapsed


async def _numpy_in_line(records: npt.NDArray[Any]) -> float:
    t0 = time.perf_counter()
    result = np.concatenate([paths.double(chunk) for chunk in _chunks(records)])
    elapsed = time.perf_counter() - t0
    _check(result, records)
    return len(records) / elapsed


def _kernel(capacity: int) -> PersistentKernel:
    return PersistentKernel(
        "double", paths.REQ, paths.REP, capacity=capacity, max_batch=CHUNK
    ).add_body("cpu", paths.double)


async def _pdc_batched(records: npt.NDArray[Any], capacity: int) -> float:
    async with open_persistent_kernel(_kernel(capacity), "cpu") as session:
        await session.request_batch(records[:CHUNK])  # the worker is warm
        t0 = time.perf_counter()
        result = await session.request_batch(records)
        elapsed = time.perf_counter() - t0
    _check(result, records)
    return len(records) / elapsed


BATCHED: dict[str, Callable[[npt.NDArray[Any]], Awaitable[float]]] = {
    "floor: worker thread, all queued": lambda r: _worker_batched(r, None),
    "floor: worker thread, one in flight": lambda r: _worker_batched(r, 1),
    "NumPy in line (no thread)": _numpy_in_line,
    "pdc request_batch, capacity 1024": lambda r: _pdc_batched(r, 1024),
    "pdc request_batch, capacity 16384": lambda r: _pdc_batched(r, 16384),
}
BATCH_RATIOS = [
    ("pdc request_batch, capacity 16384", "floor: worker thread, all queued"),
    ("pdc request_batch, capacity 1024", "floor: worker thread, all queued"),
    ("pdc request_batch, capacity 1024", "floor: worker thread, one in flight"),
]


# -- round trip ----------------------------------------------------------------------------


async def _handoff_round_trips(n: int) -> list[int]:
    send, receive = anyio.create_memory_object_stream[Any](1)
    worker = _Worker(_threadsafe_call(), send.send_nowait)
    record = paths._records(1)
    try:
        samples = []
        clock = time.perf_counter_ns
        for _ in range(n):
            t0 = clock()
            worker.inbox.put(record)
            await receive.receive()
            samples.append(clock() - t0)
    finally:
        worker.close()
    return samples


async def _pdc_round_trips(n: int, wait: str = "sleep") -> list[int]:
    record = paths._records(1)
    async with open_persistent_kernel(_kernel(1024), "cpu", wait=wait) as session:  # type: ignore[arg-type]
        samples = []
        clock = time.perf_counter_ns
        for _ in range(n):
            t0 = clock()
            await session.request(record)
            samples.append(clock() - t0)
    return samples


ROUND_TRIP: dict[str, Callable[[int], Awaitable[list[int]]]] = {
    "floor: thread hand-off": _handoff_round_trips,
    "pdc request": _pdc_round_trips,
    'pdc request, wait="spin"': lambda n: _pdc_round_trips(n, "spin"),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--round-trips", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="3 rounds, fewer records")
    parser.add_argument("--loop", choices=LIBRARIES, action="append", help="default: both")
    parser.add_argument("--markdown", action="store_true", help="also the command and versions")
    parser.add_argument(
        "--only", choices=["batched", "round-trip"], help="one of the two tables (default: both)"
    )
    args = parser.parse_args()
    if args.quick:
        args.records, args.round_trips, args.rounds = 50_000, 1_000, 3
    libraries = args.loop or list(LIBRARIES)
    records = paths._records(args.records)

    rates: dict[tuple[str, str], list[float]] = {}
    p50s: dict[tuple[str, str], list[float]] = {}
    for round_index in range(args.rounds):
        for library in libraries:
            for name in paths.rotated(list(BATCHED), round_index):
                if args.only == "round-trip":
                    break
                rate = paths.run_fresh(library, BATCHED[name], records)
                rates.setdefault((library, name), []).append(rate)
            for name in paths.rotated(list(ROUND_TRIP), round_index):
                if args.only == "batched":
                    break
                samples = paths.run_fresh(library, ROUND_TRIP[name], args.round_trips)
                p50s.setdefault((library, name), []).append(statistics.median(samples) / 1e3)
        print(f"round {round_index + 1}/{args.rounds} done", file=sys.stderr)

    if args.markdown:
        print(f"- Command: `{command_line()}`")
        for key, value in environment(["numpy", "anyio", "trio", "pdc-core", "pdc-cpu"]).items():
            print(f"- {key}: {value}")
        print()
    for what, values, names, form in (
        ("records/s (median)", rates, BATCHED, "{:,.0f}"),
        ("round trip p50 (us, median)", p50s, ROUND_TRIP, "{:.1f}"),
    ):
        if not values:
            continue
        rows = [
            [library, name, form.format(statistics.median(values[library, name]))]
            for library in libraries
            for name in names
        ]
        print(table(["loop", "path", what], rows, "llr"))
        print()
    rows = []
    for library in libraries:
        for ours, floor in BATCH_RATIOS if rates else ():
            pairs = zip(rates[library, ours], rates[library, floor], strict=True)
            ratios = [a / b for a, b in pairs]
            rows.append([library, f"{ours} / {floor}", _ratio_text(ratios)])
        floor_p50 = p50s.get((library, "floor: thread hand-off"), [])
        for ours in ("pdc request", 'pdc request, wait="spin"') if floor_p50 else ():
            ratios = [a / b for a, b in zip(p50s[library, ours], floor_p50, strict=True)]
            rows.append([library, f"{ours} p50 / thread hand-off p50", _ratio_text(ratios)])
    print(table(["loop", "ratio (same round)", "median (range)"], rows, "llr"))
    return 0


def _ratio_text(ratios: list[float]) -> str:
    return f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"


if __name__ == "__main__":
    sys.exit(main())
