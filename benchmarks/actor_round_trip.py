"""Round-trip latency of one request/reply, side by side, in one run.

Run from the repository root (PyDotCompute is optional: ``pip install pydotcompute==0.2.0``
into the same environment to include it)::

    python benchmarks/actor_round_trip.py             # 15 rounds x 2000 round trips
    python benchmarks/actor_round_trip.py --quick     # 5 rounds x 1000

Contenders, each echoing the same pre-built ``Request`` object back to the caller:

* ``floor`` -- the least any two-task round trip costs on the event loop: a server task
  parked on a bare ``asyncio`` future or ``trio.lowlevel.wait_task_rescheduled``, no
  queue, no checks. Nothing built on two tasks can beat it; ``ask`` is held to 1.25x it.
* ``bare anyio streams`` -- a request and a reply memory-object stream written the
  obvious way: the caller ``await send`` then ``await receive``; a server task does
  ``async for msg in requests: await replies.send(msg)``.
* ``pdc ask`` -- ``await ref.ask(msg)`` on a mailbox actor whose handler returns msg.
* ``pdc seed facade`` -- ``await runtime.send(id, msg); await runtime.receive(id)`` on
  pdc's ``RingKernelRuntime`` with the kernel below.
* ``PyDotCompute 0.2.0`` -- the same two calls on PyDotCompute's ``RingKernelRuntime``
  with the *same kernel source* (asyncio only; PyDotCompute does not run on trio).

The kernel is the seeds' loop shape (``while not ctx.should_terminate``, wait while
inactive, ``msg = await ctx.receive(timeout=TIMEOUT)`` -- skipping on any exception --,
``await ctx.send(msg)``; ``pdc_core._cli._bench_paths``), run twice: with ``TIMEOUT=0.1``
(as every seed kernel does) and with ``TIMEOUT=None``.
(``except Exception`` because PyDotCompute's receive timeout, ``QueueTimeoutError``,
is not a ``TimeoutError``: the seeds' ``except asyncio.TimeoutError`` would let it
kill the kernel there.)

The contenders are the paths of ``pdc_core._cli._bench_paths`` (shared with ``pdc bench``);
this script only chooses them, runs the rounds and prints. Each contender runs in a
fresh event loop per round (the collector paused); within a round the contenders
run back to back in a rotating order. The table shows percentiles of all samples
pooled; the targets are ratios of p50s taken within each round (side by side), and
their median over the rounds, which a burst of load from another process on a shared
machine cannot skew.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys

import pdc_core
from pdc_core._cli import _bench_paths as paths
from pdc_core._cli._bench_stats import command_line, print_header, ratio, summarize, table

PACKAGES = ["anyio", "trio", "numpy", "sniffio", "pydotcompute", "pdc-core"]
FLOOR = "floor: bare two-task handoff, no queue"
BARE = "bare anyio streams"
ASK = "pdc ask"
FACADE_T = "pdc seed facade, receive(timeout=0.1)"
FACADE = "pdc seed facade, receive()"
PYDOT_T = "PyDotCompute, receive(timeout=0.1)"
PYDOT = "PyDotCompute, receive()"

#: Whether PyDotCompute is installed (its kernels registered) for the comparison.
HAVE_PYDOTCOMPUTE = paths.pydotcompute() is not None


def contenders() -> list[tuple[str, str, paths.LatencySampler]]:
    """(backend, label, sampler) for everything that can run here."""
    out: list[tuple[str, str, paths.LatencySampler]] = []
    for backend in ("asyncio", "trio"):
        out += [
            (backend, FLOOR, paths.floor_handoff),
            (backend, BARE, paths.bare_streams),
            (backend, ASK, paths.pdc_ask),
            (backend, FACADE_T, paths.facade_round_trip(paths.ECHO)),
            (backend, FACADE, paths.facade_round_trip(paths.ECHO_NO_TIMEOUT)),
        ]
    theirs_t = paths.pydotcompute_round_trip(paths.ECHO)
    theirs = paths.pydotcompute_round_trip(paths.ECHO_NO_TIMEOUT)
    if theirs_t is not None and theirs is not None:
        out += [("asyncio", PYDOT_T, theirs_t), ("asyncio", PYDOT, theirs)]
    return out


def targets() -> list[tuple[str, tuple[str, str], tuple[str, str], float]]:
    """(name, numerator, denominator, bound): the design targets (``ask`` against a bare
    stream ping-pong and against the event loop's two-task floor), plus the same ratios
    against PyDotCompute's kernel written without a receive timeout."""
    out = []
    for backend, bound in (("asyncio", 1 / 3), ("trio", 1 / 2)):
        out.append((f"{backend}: ask / bare streams", (backend, ASK), (backend, BARE), 1.25))
        out.append(
            (f"{backend}: ask / floor (two-task hand-off)", (backend, ASK), (backend, FLOOR), 1.25)
        )
        if HAVE_PYDOTCOMPUTE:
            out += [
                (
                    f"{backend}: ask / PyDotCompute, seed kernel (timeout=0.1)",
                    (backend, ASK),
                    ("asyncio", PYDOT_T),
                    bound,
                ),
                (
                    f"{backend}: facade / PyDotCompute, same seed kernel (timeout=0.1)",
                    (backend, FACADE_T),
                    ("asyncio", PYDOT_T),
                    0.5,
                ),
                (
                    f"{backend}: floor (no queue at all) / PyDotCompute, kernel without timeout",
                    (backend, FLOOR),
                    ("asyncio", PYDOT),
                    bound,
                ),
                (
                    f"{backend}: ask / PyDotCompute, kernel without timeout",
                    (backend, ASK),
                    ("asyncio", PYDOT),
                    bound,
                ),
                (
                    f"{backend}: facade / PyDotCompute, same kernel without timeout",
                    (backend, FACADE),
                    ("asyncio", PYDOT),
                    0.5,
                ),
            ]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="round trips per contender per round")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--quick", action="store_true", help="5 rounds x 1000")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    if args.quick:
        args.n, args.rounds = 1000, 5

    env = print_header(
        "Actor round trip (one request, one reply), microseconds",
        PACKAGES,
        f"Rounds: {args.rounds}; in each, every contender does {args.n} round trips "
        f"(+{args.warmup} warm-up) in a fresh event loop, in rotating order.",
    )

    runs = contenders()
    samples: dict[tuple[str, str], list[int]] = {(b, label): [] for b, label, _ in runs}
    round_p50: dict[tuple[str, str], list[float]] = {key: [] for key in samples}
    for round_index in range(args.rounds):
        for backend, label, sampler in paths.rotated(runs, round_index):
            result = paths.run_fresh(backend, sampler, args.n, args.warmup)
            samples[(backend, label)] += result
            round_p50[(backend, label)].append(summarize(result).p50 / 1e3)
        print(f"round {round_index + 1}/{args.rounds} done", file=sys.stderr)

    stats = {key: summarize(values).scaled(1e-3) for key, values in samples.items()}
    print("All samples pooled:")
    print()
    rows = [
        [backend, label, f"{s.p50:.2f}", f"{s.p99:.2f}", ratio(s.p50, stats[(backend, BARE)].p50)]
        for (backend, label), s in stats.items()
    ]
    print(table(["backend", "implementation", "p50 us", "p99 us", "p50 / bare"], rows, "llrrr"))
    print()

    # Ratios of p50s measured in the same round (side by side, minutes apart at most),
    # then the median over rounds: robust to a burst of load on a shared machine.
    checks = []
    for name, num, den, bound in targets():
        per_round = sorted(a / b for a, b in zip(round_p50[num], round_p50[den], strict=True))
        value = statistics.median(per_round)
        checks.append((name, value, bound, per_round[0], per_round[-1]))
    print("Targets (median over rounds of the per-round p50 ratio; range over rounds):")
    print()
    print(
        table(
            ["ratio of p50s", "measured", "range", "target", "met"],
            [
                [
                    name,
                    f"{value:.3f}",
                    f"{low:.2f}-{high:.2f}",
                    f"<= {bound:.3f}",
                    "yes" if value <= bound else "NO",
                ]
                for name, value, bound, low, high in checks
            ],
            "lrrrl",
        )
    )
    if not HAVE_PYDOTCOMPUTE:
        print("\nPyDotCompute is not installed: pip install pydotcompute==0.2.0 to compare.")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(
                {
                    "environment": env,
                    "command": command_line(),
                    "pdc_core": pdc_core.__version__,
                    "pooled": {
                        f"{b} / {label}": {"p50_us": s.p50, "p99_us": s.p99, "n": s.count}
                        for (b, label), s in stats.items()
                    },
                    "round_p50_us": {f"{b} / {label}": v for (b, label), v in round_p50.items()},
                    "targets": {
                        name: {"value": v, "bound": bd, "min": lo, "max": hi}
                        for name, v, bd, lo, hi in checks
                    },
                },
                fh,
                indent=2,
            )
    return 0


if __name__ == "__main__":
    asyncio.set_event_loop_policy(None)  # the stock loop, whatever an import installed
    sys.exit(main())
