"""A persistent kernel against dispatching the same work per message, in one run.

Run from the repository root::

    python benchmarks/ring_kernel.py                    # the cpu backend, full run
    python benchmarks/ring_kernel.py --quick            # fewer messages
    python benchmarks/ring_kernel.py --backend cpu --markdown   # + a docs/benchmarks.md section

The work is the same everywhere: a request record ``(id: u8, x: f8)`` becomes a reply
``(id: u8, y: f8)`` with ``y = 2 x``. Under asyncio and under trio it measures:

* **persistent, round trip**: ``await session.request(record)`` on a persistent kernel
  opened with ``open_persistent_kernel`` (host writes the ring, the device side
  answers, the host reads the reply); p50/p99 over many sequential round trips.
* **per message, round trip**: the same work dispatched per message the way the backend
  would without a resident kernel. On ``cpu``: a new task per message, started in a
  task group, computing the body on a 1-record array and handing the reply back through
  an event (what an actor framework without rings does).
* **persistent-kernel actor, ask**: the same kernel started as an actor of a nursery,
  ``await ref.ask(record)`` (what the actor layer adds to the session's round trip).
* **persistent, batched**: ``request_batch`` of many records (the ring's capacity is
  1024 slots, so a device batch is up to 1024 records, one body call over a NumPy
  slice) -> messages per second.
* **per message, batched**: the same records, one dispatch each, all in flight at once
  -> messages per second.

Ratios are computed from numbers taken in the same run. For the cpu backend it also
measures the two designs the protocol avoids, as evidence: a worker thread that spins
on the control block instead of sleeping on a doorbell (``worker_wait="spin"``), and a
host that polls in the event loop instead of sleeping until the worker signals
(``host_wait="poll"``).

The paths are those of ``pdc_core._cli._bench_paths`` (shared with ``pdc bench``); this
script only chooses them and prints. ``--backend`` selects the backend; a backend needs
a body in ``pdc_core._cli._bench_paths.BODIES`` and a per-message baseline in its
``PER_MESSAGE`` (the CUDA rows: see also
``benchmarks/cuda_ring.py``, which measures the resident CUDA kernel against a launch
plus copies per message).
"""

from __future__ import annotations

import argparse
import datetime
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from pdc_core import get_backend
from pdc_core._cli import _bench_paths as paths
from pdc_core._cli._bench_stats import command_line, environment, ratio, summarize, table

#: Untimed round trips before each timed series.
WARMUP = 200

#: The cpu backend's alternatives to its default waiting, as evidence for the design:
#: (label, round trips, launch options).
EVIDENCE: list[tuple[str, int, dict[str, str]]] = [
    ("doorbell / selector (default)", 10_000, {}),
    ("spins / selector", 1_000, {"worker_wait": "spin"}),
    ("doorbell / polls in loop", 10_000, {"host_wait": "poll"}),
    ("spins / polls in loop", 1_000, {"worker_wait": "spin", "host_wait": "poll"}),
]


def run(library: str, fn: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Any:
    """Run ``fn`` in a fresh event loop of ``library`` with the collector paused."""
    return paths.run_fresh(library, lambda: fn(*args, **kwargs))


def us(nanoseconds: float) -> str:
    return f"{nanoseconds / 1e3:.1f}"


def rate(per_second: float) -> str:
    return f"{per_second:,.0f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="cpu", help="backend to measure (default: cpu)")
    parser.add_argument("--quick", action="store_true", help="fewer messages")
    parser.add_argument("--markdown", action="store_true", help="print a docs section too")
    parser.add_argument("--libraries", default="asyncio,trio", help="event loops, comma-separated")
    args = parser.parse_args(argv)
    backend_name = args.backend.partition(":")[0]
    if backend_name not in paths.BODIES:
        known = sorted(paths.BODIES)
        parser.error(f"no kernel body for backend {backend_name!r}; known: {known}")
    backend = get_backend(args.backend)  # raises with what to install when unavailable
    libraries = [name.strip() for name in args.libraries.split(",") if name.strip()]
    round_trips = 2_000 if args.quick else 10_000
    batched = 100_000 if args.quick else 1_000_000
    per_message_batched = 20_000 if args.quick else 100_000
    evidence_cap = 200 if args.quick else round_trips
    baseline = paths.PER_MESSAGE.get(backend_name)

    rows: list[list[str]] = []
    ratios: list[list[str]] = []
    evidence: list[list[str]] = []
    for library in libraries:
        print(f"[{library}] persistent round trips ...", file=sys.stderr)
        persistent = summarize(
            run(library, paths.persistent_round_trip(args.backend), round_trips, WARMUP)
        )
        rows.append(
            [library, "persistent kernel", "round trip", us(persistent.p50), us(persistent.p99), ""]
        )
        print(f"[{library}] persistent-kernel actor asks ...", file=sys.stderr)
        actor = summarize(
            run(library, paths.persistent_actor_round_trip(args.backend), round_trips, WARMUP)
        )
        rows.append([library, "persistent-kernel actor", "ask", us(actor.p50), us(actor.p99), ""])
        print(f"[{library}] persistent batched ...", file=sys.stderr)
        persistent_rate = run(library, paths.persistent_batched(args.backend), batched)
        rows.append(
            [
                library,
                "persistent kernel",
                f"request_batch({batched:,})",
                "",
                "",
                rate(persistent_rate),
            ]
        )
        if baseline is None:
            print(f"no per-message baseline for {backend_name}", file=sys.stderr)
            continue
        label, round_trip_fn, throughput_fn = baseline
        print(f"[{library}] {label} ...", file=sys.stderr)
        dispatched = summarize(run(library, round_trip_fn, round_trips, WARMUP))
        rows.append([library, label, "round trip", us(dispatched.p50), us(dispatched.p99), ""])
        dispatched_rate = run(library, throughput_fn, per_message_batched)
        rows.append(
            [library, label, f"{per_message_batched:,} in flight", "", "", rate(dispatched_rate)]
        )
        ratios.append(
            [
                library,
                ratio(dispatched.p50, persistent.p50),
                ratio(dispatched.p99, persistent.p99),
                ratio(persistent_rate, dispatched_rate, 1),
                ratio(actor.p50, persistent.p50),
            ]
        )
        if backend_name == "cpu":
            print(f"[{library}] evidence: spinning worker, polling host ...", file=sys.stderr)
            for what, count, options in EVIDENCE:
                samples, idle_load = run(
                    library,
                    paths.persistent_round_trips_and_idle,
                    "cpu",
                    min(count, evidence_cap),
                    WARMUP,
                    0.5,
                    **options,
                )
                other = summarize(samples)
                evidence.append(
                    [
                        library,
                        what,
                        us(other.p50),
                        us(other.p99),
                        ratio(other.p50, persistent.p50, 1),
                        ratio(other.p99, persistent.p99, 1),
                        f"{idle_load * 100:.0f}%",
                    ]
                )

    if backend_name == "cpu":
        floor = summarize(paths.thread_ping_pong(round_trips))
        rows.append(
            ["-", "thread ping-pong (floor)", "2 Event hand-offs", us(floor.p50), us(floor.p99), ""]
        )
    env = environment(["numpy", "anyio", "trio", "pdc-core", "pdc-cpu"])
    now = datetime.date.today().isoformat()
    out = [
        f"Backend: {backend.qualified_name} ({backend.device_info.name}); date {now}",
        "Environment: " + ", ".join(f"{k} {v}" for k, v in env.items()),
        f"Command: {command_line()}",
        "",
        table(["loop", "path", "what", "p50 (us)", "p99 (us)", "msgs/s"], rows, "lllrrr"),
        "",
    ]
    if ratios:
        out += [
            "Ratios (same run): per-message / persistent latency (>1: the persistent kernel "
            "is faster), persistent / per-message throughput, and the actor's ask / the "
            "session's round trip p50 (its overhead as an actor)",
            "",
            table(
                ["loop", "round trip p50", "round trip p99", "batched throughput", "actor ask"],
                ratios,
                "lrrrr",
            ),
            "",
        ]
    if evidence:
        out += [
            "Why the cpu worker sleeps on a doorbell and the host sleeps in its selector: "
            "persistent round trips with the alternatives (x: multiple of the default's "
            "in the first table; idle: CPU the process burns, as a share of one core, "
            "while the kernel waits for work)",
            "",
            table(
                [
                    "loop",
                    "worker / host waiting",
                    "p50 (us)",
                    "p99 (us)",
                    "p50 x",
                    "p99 x",
                    "idle",
                ],
                evidence,
                "llrrrrr",
            ),
            "",
        ]
    print("\n".join(out))
    if args.markdown:
        device = backend.device_info
        print("\n<!-- a section for docs/benchmarks.md -->")
        print(f"## Persistent kernels ({backend_name.upper()} backend)\n")
        print(f"- Date: {now}")
        print(f"- Machine: {device.name}, {env['cpus']} cores, {env['platform']}")
        print(
            f"- Versions: Python {env['python']}, NumPy {env['numpy']}, anyio {env['anyio']}, "
            f"trio {env['trio']}, pdc-core {env['pdc-core']}, pdc-cpu {env['pdc-cpu']}"
        )
        print(f"- Command (repository root): `{command_line()}`\n")
        print("\n".join(out[4:]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
