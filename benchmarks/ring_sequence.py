"""What sequenced input slots cost the host, and what they buy a GPU (ring-protocol.md §12).

The same persistent kernel with a plain input ring and with sequenced input slots (the
host then stores a sequence word after each record, into strided slots), in
interleaved rounds:

* round trip: ``await session.request(record)``, p50 over ``--requests`` per round;
* throughput: ``session.request_batch`` of ``--batch`` records through ``--capacity``
  slots;
* the host alone: ``RingHost.write`` of one record and of a batch into an empty ring
  (no device), ns per record.

The table reports medians over rounds and the median of the per-round ratios
sequenced/plain, under asyncio and trio.

    .venv/bin/python benchmarks/ring_sequence.py --rounds 7
    .venv/bin/python benchmarks/ring_sequence.py --backend cuda --rounds 7

On the cpu backend (plain slots by default) the kernel's layout asks for sequence
words; on cuda (sequenced slots by default) the plain contender runs on a cuda backend
that declares ``ring_sequenced_input = False``, so the kernel polls ``IN_HEAD`` and
reads the slot with a second PCIe read. ``--backend cuda`` needs a GPU: without one it
prints why and exits with status 2.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

import anyio
import numpy as np
import numpy.typing as npt

import pdc_core
from pdc_core import PersistentKernel, open_persistent_kernel
from pdc_core.backend import Offset, RingHost, RingLayout, RingMemory

REQ = np.dtype([("id", "<u8"), ("x", "<f8")], align=True)
LAYOUTS = ("plain", "sequenced")
CUDA_DOUBLE = (
    "__device__ int pdc_body(const pdc_request& request, pdc_reply& reply) {\n"
    "    reply.id = request.id;\n"
    "    reply.x = request.x * 2.0;\n"
    "    return 0;\n"
    "}\n"
)


def kernel(capacity: int, sequenced: bool) -> PersistentKernel:
    k = PersistentKernel("double", REQ, REQ, capacity=capacity)
    k.add_body("cuda", CUDA_DOUBLE)

    @k.body("cpu")
    def body(requests: npt.NDArray[Any]) -> npt.NDArray[Any]:
        replies = np.empty(len(requests), REQ)
        replies["id"] = requests["id"]
        replies["x"] = requests["x"] * 2
        return replies

    # The cpu backend keeps plain slots; a kernel whose layout asks for sequence words
    # gets them (the host stores them, the worker polls IN_HEAD as always).
    k.layout = k.layout.with_sequenced_input(sequenced)
    return k


def backends(name: str) -> dict[str, Any]:
    """The backend each contender runs on (exits with status 2 if ``name`` cannot run)."""
    try:
        backend = pdc_core.get_backend(name)
    except pdc_core.BackendUnavailable as exc:
        print(f"ring_sequence: cannot measure on the {name} backend: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    if name == "cpu":
        return {"plain": backend, "sequenced": backend}

    class PlainSlots(type(backend)):  # type: ignore[misc]
        ring_sequenced_input = False

    return {"plain": PlainSlots(backend.device), "sequenced": backend}


async def session_round(
    args: argparse.Namespace, backend: Any, sequenced: bool
) -> dict[str, float]:
    batch = np.zeros(args.batch, REQ)
    batch["id"] = np.arange(args.batch)
    batch["x"] = np.arange(args.batch, dtype=np.float64)
    # On cpu the kernel's layout asks for sequence words; on cuda the backend decides.
    ask = sequenced and args.backend == "cpu"
    async with open_persistent_kernel(kernel(args.capacity, ask), backend) as session:
        assert session.memory.layout.sequenced_input is sequenced
        for index in range(50):  # warm up
            await session.request((index, 1.0))
        times = []
        for index in range(args.requests):
            start = time.perf_counter()
            await session.request((index, 1.0))
            times.append(time.perf_counter() - start)
        start = time.perf_counter()
        for _ in range(args.repeat):
            replies = await session.request_batch(batch)
        rate = args.batch * args.repeat / (time.perf_counter() - start)
        assert np.array_equal(replies["x"], batch["x"] * 2)
    return {"p50": statistics.median(times) * 1e6, "rate": rate / 1e6}


def host_write_ns(count: int, sequenced: bool, repeat: int) -> float:
    """ns per record of RingHost.write of ``count`` records into an empty ring."""
    memory = RingMemory.from_buffer(RingLayout(REQ, REQ, max(count, 1), sequenced_input=sequenced))
    records = np.zeros(count, REQ)
    host = RingHost(memory)
    words = memory.words64
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(100):
            host.write(records)
            # Free the ring again as a device would (it owns IN_TAIL), so every write fits.
            words[Offset.IN_TAIL >> 3] = host.in_head
            host.load_in_tail()
        best = min(best, (time.perf_counter() - start) / 100)
    return best / count * 1e9


def measure(
    args: argparse.Namespace, loop: str, contenders: dict[str, Any]
) -> dict[str, dict[str, list[float]]]:
    results: dict[str, dict[str, list[float]]] = {
        name: {"p50": [], "rate": [], "write 1": [], "write batch": []} for name in LAYOUTS
    }
    for round_ in range(args.rounds):
        order = LAYOUTS if round_ % 2 == 0 else tuple(reversed(LAYOUTS))
        for name in order:
            sequenced = name == "sequenced"
            measured = anyio.run(session_round, args, contenders[name], sequenced, backend=loop)
            results[name]["p50"].append(measured["p50"])
            results[name]["rate"].append(measured["rate"])
            results[name]["write 1"].append(host_write_ns(1, sequenced, 20))
            results[name]["write batch"].append(host_write_ns(args.batch, sequenced, 5))
    return results


def report(loop: str, results: dict[str, dict[str, list[float]]]) -> list[str]:
    rows = []
    for name in LAYOUTS:
        r = results[name]
        rows.append(
            f"| {loop} | {name} | {statistics.median(r['p50']):.1f} | "
            f"{statistics.median(r['rate']):.2f} | {statistics.median(r['write 1']):.0f} | "
            f"{statistics.median(r['write batch']):.1f} |"
        )
    plain, sequenced = results["plain"], results["sequenced"]

    def ratio(key: str) -> str:
        per_round = [s / p for s, p in zip(sequenced[key], plain[key], strict=True)]
        return f"{statistics.median(per_round):.2f}x"

    rows.append(
        f"| {loop} | sequenced/plain (median of per-round ratios) | {ratio('p50')} | "
        f"{ratio('rate')} | {ratio('write 1')} | {ratio('write batch')} |"
    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--requests", type=int, default=1000, help="round trips per round")
    parser.add_argument("--batch", type=int, default=16384, help="records per batch")
    parser.add_argument("--repeat", type=int, default=5, help="batches per round")
    parser.add_argument("--capacity", type=int, default=1024, help="slots per ring")
    parser.add_argument("--loops", default="asyncio,trio")
    args = parser.parse_args()
    contenders = backends(args.backend)
    device = contenders["sequenced"].device_info.name
    print(f"pdc-core {pdc_core.__version__}, numpy {np.__version__}, {device}, {args}")
    print(
        "| loop | input slots | round trip p50 (us) | request_batch (M records/s) | "
        "host write, 1 record (ns) | host write, batch (ns/record) |"
    )
    print("|---|---|---:|---:|---:|---:|")
    for loop in args.loops.split(","):
        for row in report(loop, measure(args, loop, contenders)):
            print(row, flush=True)


if __name__ == "__main__":
    main()
