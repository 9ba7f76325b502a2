"""Throughput of messages into one actor and replies back, side by side, in one run.

Run from the repository root (PyDotCompute is optional: ``pip install pydotcompute==0.2.0``
into the same environment to include it)::

    python benchmarks/actor_throughput.py            # 3 rounds x 100,000 messages
    python benchmarks/actor_throughput.py --quick    # 2 rounds x 30,000

Every contender gets the same pre-built ``Request(data=i)`` messages and returns
``data * 2`` for each, and the replies are checked. Time runs from the first send to
the last reply.

* ``PyDotCompute 0.2.0 streaming`` -- a producer task ``await runtime.send(id, msg)``
  for every message while the caller ``await runtime.receive(id)`` every reply; the
  kernel is the seeds' loop (``ctx.receive(timeout=0.1)``, ``ctx.send(msg.data * 2)``),
  queues of 4096. PyDotCompute has no batch API on its runtime.
* ``pdc seed facade streaming`` -- the same code and kernel on pdc's runtime.
* ``pdc ask_many, handle()`` -- ``await ref.ask_many(messages)`` into a mailbox actor
  (capacity 4096) whose ``handle(msg)`` returns ``msg.data * 2``, one call per message.
* ``pdc ask_many, handle_batch()`` -- the batched path: the same actor with
  ``handle_batch(msgs)`` returning ``[m.data * 2 for m in msgs]``, called once per run
  of waiting messages (up to 4096), the shape of a GPU kernel over a batch.

The contenders are the paths of ``pdc_core._cli._bench_paths`` (shared with ``pdc bench``);
this script only chooses them, runs the rounds and prints. Rounds are interleaved in a
rotating order (each contender in a fresh event loop, the collector paused); the table
shows each contender's median rate over rounds, and its ratio to PyDotCompute's rate in
the same round (median and range over rounds), which a burst of load on a shared
machine cannot skew.

A second table is one-way traffic, ``--tell-n`` messages per run, against its floor:

* ``floor: asyncio.Queue`` -- written the obvious way: a producer ``await q.put(msg)``
  into an ``asyncio.Queue(4096)``, a consumer task ``await handler(await q.get())``;
  under trio a memory channel of 4096 used the same way (``send_nowait`` and
  ``receive_nowait``, waiting only when full or empty) with a checkpoint every 64
  messages on each side (trio's ``send`` and ``receive`` checkpoint on every call,
  which would measure the checkpoints rather than the channel).
* ``pdc tell`` -- ``await ref.tell(msg)`` into an actor (capacity 4096) whose handler is
  that same ``async def handler(msg)``.

These are ``benchmarks/actor_scaling.py``'s runs with one queue and one actor. Both
count the messages in the handler; the clock starts once the consumer is waiting and
stops when the handler has seen the last message; the target is ``tell`` at least the
floor's rate (median of per-round ratios).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Awaitable

import actor_scaling  # beside this script: the round-robin runs, of which these are k = 1

from pdc_core._cli import _bench_paths as paths
from pdc_core._cli._bench_stats import print_header, table

PYDOT = "PyDotCompute 0.2.0 streaming"
TELL_FLOOR = "floor: asyncio.Queue (trio: memory channel)"
TELL = "pdc tell"


def tell_floor(n: int) -> Awaitable[float]:
    """Messages per second through the event loop's own queue, written the obvious way:
    ``actor_scaling.floor`` with one queue and one consumer task."""
    return actor_scaling.floor(1, n)


def tell(n: int) -> Awaitable[float]:
    """Messages per second of ``await ref.tell(msg)`` into one actor
    (``actor_scaling.tell`` with one actor)."""
    return actor_scaling.tell(1, n)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="messages per run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tell-n", type=int, default=200_000, help="messages per one-way run")
    parser.add_argument("--tell-rounds", type=int, default=9)
    parser.add_argument("--quick", action="store_true", help="2 rounds x 30,000; 5 x 100,000")
    parser.add_argument("--tell-only", action="store_true", help="only the one-way table")
    args = parser.parse_args()
    if args.quick:
        args.n, args.rounds = 30_000, 2
        args.tell_n, args.tell_rounds = 100_000, 5
    if args.tell_only:
        one_way(args.tell_n, args.tell_rounds)
        return 0

    print_header(
        "Throughput into one actor (requests in, replies out), messages per second",
        ["anyio", "trio", "numpy", "sniffio", "pydotcompute", "pdc-core"],
        f"Rounds: {args.rounds} x {args.n} messages, median shown",
    )

    runs: list[tuple[str, str, paths.ThroughputRunner]] = []
    theirs = paths.pydotcompute_streaming()
    if theirs is not None:
        runs.append(("asyncio", PYDOT, theirs))
    for backend in ("asyncio", "trio"):
        runs += [
            (backend, "pdc seed facade streaming", paths.facade_streaming()),
            (backend, "pdc ask_many, handle()", paths.ask_many(batched=False)),
            (backend, "pdc ask_many, handle_batch()", paths.ask_many(batched=True)),
        ]
    rates: dict[tuple[str, str], list[float]] = {(b, label): [] for b, label, _ in runs}
    for round_index in range(args.rounds):
        for backend, label, runner in paths.rotated(runs, round_index):
            rates[(backend, label)].append(paths.run_fresh(backend, runner, args.n))
        print(f"round {round_index + 1}/{args.rounds} done", file=sys.stderr)

    median = {key: statistics.median(values) for key, values in rates.items()}
    ref_key = ("asyncio", PYDOT)
    reference = rates.get(ref_key)

    def side_by_side(key: tuple[str, str]) -> tuple[float, float, float]:
        """Median, min and max over rounds of this contender's rate / PyDotCompute's."""
        assert reference is not None
        per_round = sorted(a / b for a, b in zip(rates[key], reference, strict=True))
        return statistics.median(per_round), per_round[0], per_round[-1]

    rows = []
    for (backend, label), rate in median.items():
        if reference:
            mid, low, high = side_by_side((backend, label))
            versus = f"{mid:.1f}x ({low:.1f}-{high:.1f})"
        else:
            versus = "n/a"
        rows.append([backend, label, f"{rate:,.0f}", versus])
    print(
        table(
            ["backend", "implementation", "msg/s (median)", "vs PyDotCompute, same round"],
            rows,
            "llrr",
        )
    )
    if reference:
        print()
        checks = []
        for backend in ("asyncio", "trio"):
            mid, low, high = side_by_side((backend, "pdc ask_many, handle_batch()"))
            checks.append(
                [
                    f"{backend}: batched ask_many vs PyDotCompute streaming",
                    f"{mid:.1f}x",
                    f"{low:.1f}-{high:.1f}",
                    ">= 10x",
                    "yes" if mid >= 10 else "NO",
                ]
            )
        print(table(["target", "measured", "range", "target", "met"], checks, "lrrrl"))
    else:
        print("\nPyDotCompute is not installed: pip install pydotcompute==0.2.0 to compare.")
    print()
    one_way(args.tell_n, args.tell_rounds)
    return 0


def one_way(n: int, rounds: int) -> None:
    """The per-message tell table: pdc tell against the loop's own queue."""
    runs = [(b, label) for b in ("asyncio", "trio") for label in (TELL_FLOOR, TELL)]
    runners = {TELL_FLOOR: tell_floor, TELL: tell}
    rates: dict[tuple[str, str], list[float]] = {key: [] for key in runs}
    for round_index in range(rounds):
        for backend, label in paths.rotated(runs, round_index):
            rates[(backend, label)].append(paths.run_fresh(backend, runners[label], n))
        print(f"one-way round {round_index + 1}/{rounds} done", file=sys.stderr)
    print(f"Per-message tell into one actor, {n:,} messages, {rounds} rounds:")
    print()
    rows = []
    for backend in ("asyncio", "trio"):
        per_round = sorted(
            a / b for a, b in zip(rates[(backend, TELL)], rates[(backend, TELL_FLOOR)], strict=True)
        )
        mid = statistics.median(per_round)
        for label in (TELL_FLOOR, TELL):
            versus = (
                f"{mid:.2f} ({per_round[0]:.2f}-{per_round[-1]:.2f})" if label == TELL else "1.00"
            )
            rows.append(
                [backend, label, f"{statistics.median(rates[(backend, label)]):,.0f}", versus]
            )
    print(
        table(["backend", "implementation", "msg/s (median)", "/ floor, same round"], rows, "llrr")
    )


if __name__ == "__main__":
    sys.exit(main())
