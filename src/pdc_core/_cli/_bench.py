"""``pdc bench``: the latency and throughput suite behind one command.

Every *path* is measured side by side with its *baselines* in the same run, under
asyncio and trio, so the ratios mean something on any machine:

Latency (one request, one reply; samples in nanoseconds, pooled over rounds):

* ``bare anyio streams`` -- baseline: two memory-object streams, ``await send`` then
  ``await receive``, a server task echoing.
* ``pdc ask`` -- ``await ref.ask(msg)`` on a mailbox actor echoing its message.
* ``pdc seed facade`` -- ``runtime.send`` + ``runtime.receive`` on a ring kernel.
* ``PyDotCompute 0.2.0`` -- baseline, the same two calls on its runtime (asyncio only,
  when ``pydotcompute`` is installed).

* ``persistent kernel (cpu)`` -- ``session.request(record)`` on a persistent kernel
  of the cpu backend, against ``a task per message (cpu)`` -- the same work dispatched
  as a new task per message.

Throughput (messages per second into one actor, replies checked):

* ``pdc tell_many -> handle_batch`` -- batched sends into a batch-handling actor.
* ``pdc ask_many -> handle_batch`` -- batched requests, replies back.
* ``pdc ask_stream`` -- windowed request/reply.
* ``pdc seed facade streaming`` and, as baseline, ``PyDotCompute 0.2.0 streaming``:
  a producer task sends everything while the caller receives everything.
* ``persistent kernel (cpu), request_batch`` against ``a task per message (cpu), all
  in flight``.

The paths themselves live in :mod:`pdc_core._cli._bench_paths`, shared with the scripts of
``benchmarks/`` (one implementation of each); :func:`run_suite` runs them all.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from . import _bench_paths as paths
from ._bench_stats import environment
from ._bench_stats import summarize as _summary
from ._running import announce_once

__all__ = [
    "BARE",
    "PERSISTENT",
    "PER_MESSAGE_BATCHED",
    "PLOT_HINT",
    "PYDOTCOMPUTE",
    "PYDOTCOMPUTE_STREAMING",
    "BenchResult",
    "LatencyPath",
    "ThroughputPath",
    "add_arguments",
    "latency_paths",
    "plot",
    "run",
    "run_suite",
    "steps",
    "summarize",
    "throughput_paths",
]

BARE: Final = "bare anyio streams"
PYDOTCOMPUTE: Final = "PyDotCompute 0.2.0"
PERSISTENT: Final = "persistent kernel (cpu)"
PER_MESSAGE: Final = "a task per message (cpu)"
PYDOTCOMPUTE_STREAMING: Final = f"{PYDOTCOMPUTE} streaming"
PER_MESSAGE_BATCHED: Final = f"{PER_MESSAGE}, all in flight"


@dataclass(frozen=True)
class LatencyPath:
    """A measured path: ``label`` on ``async_backend``, compared with ``baselines``."""

    async_backend: str
    label: str
    sampler: paths.LatencySampler
    baselines: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.async_backend} / {self.label}"


@dataclass(frozen=True)
class ThroughputPath:
    """A throughput path: ``label`` on ``async_backend``, compared with ``baselines``."""

    async_backend: str
    label: str
    runner: paths.ThroughputRunner
    baselines: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.async_backend} / {self.label}"


def _has_cpu_kernels() -> bool:
    from .._plugins import available_backends
    from ..backend import Capability

    return any(
        info.name == "cpu"
        and info.availability.available
        and Capability.PERSISTENT_KERNELS in info.capabilities
        for info in available_backends()
    )


def latency_paths(async_backends: tuple[str, ...] = ("asyncio", "trio")) -> list[LatencyPath]:
    """Every latency path that can run here (PyDotCompute only if installed)."""
    theirs = paths.pydotcompute_round_trip()
    kernels = _has_cpu_kernels()
    out: list[LatencyPath] = []
    for backend in async_backends:
        baselines = (BARE, PYDOTCOMPUTE) if theirs is not None else (BARE,)
        out += [
            LatencyPath(backend, BARE, paths.bare_streams),
            LatencyPath(backend, "pdc ask", paths.pdc_ask, baselines),
            LatencyPath(backend, "pdc seed facade", paths.facade_round_trip(), baselines),
        ]
        if kernels:
            out += [
                LatencyPath(backend, PER_MESSAGE, paths.task_per_message_round_trip),
                LatencyPath(backend, PERSISTENT, paths.persistent_round_trip(), (PER_MESSAGE,)),
            ]
    if theirs is not None and "asyncio" in async_backends:
        out.append(LatencyPath("asyncio", PYDOTCOMPUTE, theirs))
    return out


def throughput_paths(async_backends: tuple[str, ...] = ("asyncio", "trio")) -> list[ThroughputPath]:
    """Every throughput path that can run here (PyDotCompute only if installed)."""
    theirs = paths.pydotcompute_streaming()
    kernels = _has_cpu_kernels()
    baselines = (PYDOTCOMPUTE_STREAMING,) if theirs is not None else ()
    out: list[ThroughputPath] = []
    for backend in async_backends:
        out += [
            ThroughputPath(backend, "pdc tell_many -> handle_batch", paths.tell_many, baselines),
            ThroughputPath(
                backend, "pdc ask_many -> handle_batch", paths.ask_many(batched=True), baselines
            ),
            ThroughputPath(backend, "pdc ask_stream", paths.ask_stream, baselines),
            ThroughputPath(
                backend, "pdc seed facade streaming", paths.facade_streaming(), baselines
            ),
        ]
        if kernels:
            out += [
                ThroughputPath(backend, PER_MESSAGE_BATCHED, paths.task_per_message_batched),
                ThroughputPath(
                    backend,
                    f"{PERSISTENT}, request_batch",
                    paths.persistent_batched(),
                    (PER_MESSAGE_BATCHED,),
                ),
            ]
    if theirs is not None and "asyncio" in async_backends:
        out.append(ThroughputPath("asyncio", PYDOTCOMPUTE_STREAMING, theirs))
    return out


# -- the suite --------------------------------------------------------------------------------


def summarize(samples_ns: list[int]) -> dict[str, float]:
    """Percentiles (microseconds) of latency samples in nanoseconds."""
    s = _summary(samples_ns).scaled(1e-3)
    return {
        "n": float(s.count),
        "mean_us": s.mean,
        "p50_us": s.p50,
        "p90_us": s.p90,
        "p99_us": s.p99,
        "min_us": s.minimum,
        "max_us": s.maximum,
    }


def _baseline(table: dict[str, Any], key: str, baseline: str) -> Any:
    """The baseline's entry on the same event loop, else on asyncio (PyDotCompute)."""
    backend = key.split(" / ", 1)[0]
    return table.get(f"{backend} / {baseline}") or table.get(f"asyncio / {baseline}")


@dataclass
class BenchResult:
    """Everything measured; partial (``interrupted``) after Ctrl-C."""

    latency_samples: dict[str, list[int]] = field(default_factory=dict)
    baselines: dict[str, tuple[str, ...]] = field(default_factory=dict)
    throughput: dict[str, list[float]] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    interrupted: bool = False

    def payload(self) -> dict[str, Any]:
        latency: dict[str, Any] = {}
        for key, samples in self.latency_samples.items():
            if not samples:
                continue
            entry: dict[str, Any] = summarize(samples)
            entry["baseline"] = not self.baselines.get(key)  # a path has baselines; they none
            for baseline in self.baselines.get(key, ()):
                ref = _baseline(self.latency_samples, key, baseline)
                if ref:
                    entry[f"p50_vs_{baseline}"] = entry["p50_us"] / summarize(ref)["p50_us"]
            latency[key] = entry
        throughput: dict[str, Any] = {}
        for key, values in self.throughput.items():
            if not values:
                continue
            rate = float(np.median(values))
            entry = {"msgs_per_s": rate, "rounds": len(values)}
            entry["baseline"] = not self.baselines.get(key)
            for baseline in self.baselines.get(key, ()):
                ref = _baseline(self.throughput, key, baseline)
                if ref:
                    entry[f"x_vs_{baseline}"] = rate / float(np.median(ref))
            throughput[key] = entry
        return {
            "environment": environment(["pdc-core", "anyio", "trio", "numpy", "pydotcompute"]),
            "settings": self.settings,
            "latency": latency,
            "throughput": throughput,
            "interrupted": self.interrupted,
        }


def run_suite(
    result: BenchResult,
    *,
    n: int,
    rounds: int,
    warmup: int,
    throughput_n: int,
    async_backends: tuple[str, ...] = ("asyncio", "trio"),
    on_step: Callable[[str], None] | None = None,
) -> BenchResult:
    """Run every path ``rounds`` times (rotating order, fresh event loop each time).

    Results accumulate into ``result`` as they come, so a ``KeyboardInterrupt``
    leaves everything measured so far in it.
    """
    lat = latency_paths(async_backends)
    thr = throughput_paths(async_backends)
    result.settings = {
        "n": n,
        "rounds": rounds,
        "warmup": warmup,
        "throughput_n": throughput_n,
        "async_backends": list(async_backends),
    }
    for path in lat:
        result.latency_samples.setdefault(path.key, [])
        result.baselines[path.key] = path.baselines
    for tpath in thr:
        result.throughput.setdefault(tpath.key, [])
        result.baselines[tpath.key] = tpath.baselines
    for round_index in range(rounds):
        for path in paths.rotated(lat, round_index):
            samples = paths.run_fresh(path.async_backend, path.sampler, n, warmup)
            result.latency_samples[path.key] += samples
            if on_step:
                on_step(path.key)
        for tpath in paths.rotated(thr, round_index):
            rate = paths.run_fresh(tpath.async_backend, tpath.runner, throughput_n)
            result.throughput[tpath.key].append(rate)
            if on_step:
                on_step(tpath.key)
    return result


def steps(rounds: int, async_backends: tuple[str, ...]) -> int:
    """How many steps :func:`run_suite` reports through ``on_step``."""
    return rounds * (len(latency_paths(async_backends)) + len(throughput_paths(async_backends)))


# -- the plot ---------------------------------------------------------------------------------


PLOT_HINT: Final = "--plot needs matplotlib: pip install 'pdc-core[plot]'"


def plot(result: BenchResult, path: str) -> None:
    """Latency distributions (log scale) of each path beside its baselines, per backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    backends = sorted({key.split(" / ", 1)[0] for key in result.latency_samples})
    fig, axes = plt.subplots(1, len(backends), figsize=(7 * len(backends), 4.5), squeeze=False)
    for ax, backend in zip(axes[0], backends, strict=True):
        labels: list[str] = []
        data: list[Any] = []
        for key, samples in result.latency_samples.items():
            owner, label = key.split(" / ", 1)
            if samples and (owner == backend or label == PYDOTCOMPUTE):
                labels.append(label + (" (asyncio)" if owner != backend else ""))
                data.append(np.asarray(samples, dtype=np.float64) / 1e3)
        if data:
            ax.violinplot(data, showmedians=True, quantiles=[[0.99]] * len(data))
            ax.set_xticks(range(1, len(labels) + 1), labels, rotation=20, ha="right")
        ax.set_yscale("log")
        ax.set_ylabel("round trip, us (log)")
        ax.set_title(f"{backend}: latency, median and p99")
    fig.suptitle("pdc bench: each path against its baselines")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# -- the command ------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``pdc bench``."""
    parser.add_argument("--quick", action="store_true", help="a fast, rough run (seconds)")
    parser.add_argument("--n", type=int, help="round trips per path per round")
    parser.add_argument("--rounds", type=int, help="rounds (paths interleaved per round)")
    parser.add_argument(
        "--async-backend",
        choices=("asyncio", "trio", "both"),
        default="both",
        help="event loop(s) to measure (default both)",
    )
    parser.add_argument("--json", action="store_true", help="print results as JSON")
    parser.add_argument("--plot", metavar="FILE.png", help="draw latency distributions")


def _no_ratio(entry: dict[str, Any]) -> str:
    """What a row without ratios says: a baseline, or a path whose baselines did not run."""
    return "(baseline)" if entry.get("baseline") else "n/a (its baselines did not run)"


def _table(payload: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    latency = Table(title="Round-trip latency (us)")
    for column in ("path", "p50", "p90", "p99", "vs baselines (p50 ratio)"):
        latency.add_column(column, justify="left" if column == "path" else "right")
    for key, entry in payload["latency"].items():
        ratios = ", ".join(
            f"{name[len('p50_vs_') :]}: {value:.2f}x"
            for name, value in entry.items()
            if name.startswith("p50_vs_")
        )
        latency.add_row(
            key,
            f"{entry['p50_us']:.1f}",
            f"{entry['p90_us']:.1f}",
            f"{entry['p99_us']:.1f}",
            ratios or _no_ratio(entry),
        )
    console.print(latency)
    throughput = Table(title="Throughput into one actor")
    throughput.add_column("path")
    throughput.add_column("msgs/s (median)", justify="right")
    throughput.add_column("vs baselines (rate ratio)", justify="right")
    for key, entry in payload["throughput"].items():
        ratios = ", ".join(
            f"{name[len('x_vs_') :]}: {value:.1f}x"
            for name, value in entry.items()
            if name.startswith("x_vs_")
        )
        throughput.add_row(key, f"{entry['msgs_per_s']:,.0f}", ratios or _no_ratio(entry))
    console.print(throughput)


def run(args: argparse.Namespace) -> int:
    """``pdc bench``: measure, show a table (or JSON), optionally plot; 130 on Ctrl-C."""
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print(f"pdc bench: error: {PLOT_HINT}", file=sys.stderr)
            return 2
    backends: tuple[str, ...] = (
        ("asyncio", "trio") if args.async_backend == "both" else (args.async_backend,)
    )
    if "trio" in backends:
        try:
            import trio  # noqa: F401
        except ImportError:
            if args.async_backend == "trio":
                print("pdc bench: error: trio is not installed: pip install trio", file=sys.stderr)
                return 2
            print(
                "pdc bench: trio is not installed (pip install trio): measuring asyncio only",
                file=sys.stderr,
            )
            backends = ("asyncio",)
    n = args.n if args.n is not None else (300 if args.quick else 5000)
    rounds = args.rounds if args.rounds is not None else (1 if args.quick else 3)
    for name, value in (("--n", n), ("--rounds", rounds)):
        if value < 1:
            print(f"pdc bench: error: {name} must be at least 1, got {value}", file=sys.stderr)
            return 2
    warmup = min(500, max(50, n // 10))
    throughput_n = 2000 if args.quick else 50_000

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    result = BenchResult()
    progress = Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
    )
    task = progress.add_task("benchmarking", total=steps(rounds, backends))

    announce = announce_once("bench", f"({', '.join(backends)})")

    def on_step(key: str) -> None:
        announce()  # a first measurement is in
        progress.update(task, advance=1, description=key)

    with progress:
        try:
            run_suite(
                result,
                n=n,
                rounds=rounds,
                warmup=warmup,
                throughput_n=throughput_n,
                async_backends=backends,
                on_step=on_step,
            )
        except KeyboardInterrupt:
            result.interrupted = True
        except BaseExceptionGroup as group:
            from ._demo import _only_interrupts

            if not _only_interrupts(group):
                raise
            result.interrupted = True
    payload = result.payload()
    if args.json:
        json.dump(payload, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        _table(payload)
    if args.plot and result.latency_samples:
        plot(result, args.plot)
        print(f"plot written to {args.plot}", file=sys.stderr)
    if result.interrupted:
        print("interrupted: partial results above", file=sys.stderr)
        return 130
    return 0
