"""What the per-message entry check costs: ``tell`` and ``ask`` with and without it.

Every per-message call of a handle first checks whether the caller's cancel scope is
already cancelled (and then raises that cancellation instead of sending). This measures
the check in one process, on one actor: blocks of ``tell`` and of ``ask`` alternate
between the real check and ``bool()`` in its place (a C call that returns False, the
floor of any check), and the difference of each pair of blocks is taken, so a burst of
load from another process moves both sides of a pair::

    python benchmarks/actor_entry_check.py            # 24 pairs of blocks per loop
    python benchmarks/actor_entry_check.py --pairs 8  # quicker
    python benchmarks/actor_entry_check.py --clock cpu  # this process's CPU time

``--clock cpu`` times each block with ``time.process_time()`` instead of the wall
clock: on a machine shared with other work, a block that loses the CPU to another
process is not charged for the time it waited (the event loop runs in one thread).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Callable
from typing import Any

import anyio

import pdc_core
from pdc_core._loop import current_kit

N_TELL, N_ASK = 50_000, 10_000
CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.process_time}


async def measure(pairs: int, clock: Callable[[], float]) -> dict[tuple[str, bool], list[float]]:
    async def handler(message: Any) -> Any:
        return message

    results: dict[tuple[str, bool], list[float]] = {
        (op, checked): [] for op in ("tell", "ask") for checked in (True, False)
    }
    async with pdc_core.open_nursery() as nursery:
        ref: Any = await nursery.start_actor(handler)
        check = current_kit().cancel_called
        for _ in range(2000):
            await ref.ask(1)
        gc.disable()
        try:
            for block in range(2 * pairs):
                checked = block % 2 == 0
                ref._cancel_called = check if checked else bool  # the bound entry check
                begin = clock()
                for i in range(N_TELL):
                    await ref.tell(i)
                await ref.ask(0)  # every tell handled
                results[("tell", checked)].append((clock() - begin) / N_TELL)
                begin = clock()
                for i in range(N_ASK):
                    await ref.ask(i)
                results[("ask", checked)].append((clock() - begin) / N_ASK)
        finally:
            gc.enable()
            ref._cancel_called = check
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=24, help="pairs of blocks per loop")
    parser.add_argument(
        "--clock", choices=("wall", "cpu"), default="wall", help="wall clock or CPU time"
    )
    args = parser.parse_args()
    print("| loop | call | with the check, ns | with bool(), ns | paired difference |")
    print("| --- | --- | ---: | ---: | ---: |")
    for backend in ("asyncio", "trio"):
        results = anyio.run(measure, args.pairs, CLOCKS[args.clock], backend=backend)
        for op in ("tell", "ask"):
            real, floor = results[(op, True)], results[(op, False)]
            diff = statistics.median(r - f for r, f in zip(real, floor, strict=True))
            base = statistics.median(floor)
            print(
                f"| {backend} | {op} | {statistics.median(real) * 1e9:,.0f} | "
                f"{base * 1e9:,.0f} | {diff * 1e9:+,.0f} ns ({diff / base:+.1%}) |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
