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

Throughput (messages per second into one actor):

* ``pdc tell_many -> handle_batch`` -- batched sends into a batch-handling actor.
* ``pdc ask_stream`` -- windowed request/reply.
* ``PyDotCompute streaming`` -- baseline: send everything, receive everything.

The measuring functions are plain coroutines usable on their own
(:func:`measure_latency`, :func:`measure_throughput`); :func:`run_suite` runs them all.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import platform
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Final

import anyio
import numpy as np

from ._actors import Actor, open_nursery
from ._messages import Request
from ._ring_kernel import RingKernelRuntime, ring_kernel

__all__ = [
    "BenchResult",
    "LatencyPath",
    "add_arguments",
    "latency_paths",
    "measure_throughput",
    "run",
    "run_suite",
    "summarize",
    "throughput_paths",
]

LatencySampler = Callable[[int, int], Awaitable[list[int]]]
ThroughputRunner = Callable[[int], Awaitable[float]]

_ECHO_KERNEL: Final = "pdc_bench_echo"


async def _echo_kernel(ctx: Any) -> None:
    while not ctx.should_terminate:
        if not ctx.is_active:
            await ctx.wait_active()
            continue
        try:
            msg = await ctx.receive(timeout=0.1)
        except Exception:  # PyDotCompute's receive timeout is no TimeoutError
            continue
        await ctx.send(msg)


ring_kernel(kernel_id=_ECHO_KERNEL, queue_size=4096)(_echo_kernel)


def _pydotcompute() -> Any:
    """The ``pydotcompute`` module with the echo kernel registered, or None."""
    os.environ.setdefault("PYDOTCOMPUTE_NO_UVLOOP", "1")
    try:
        module: Any = importlib.import_module("pydotcompute")
    except ImportError:
        return None
    if not getattr(module, "_pdc_bench_registered", False):
        module.ring_kernel(kernel_id=_ECHO_KERNEL, queue_size=4096)(_echo_kernel)
        module._pdc_bench_registered = True
    return module


# -- latency paths ----------------------------------------------------------------------------


async def _bare_streams(n: int, warmup: int) -> list[int]:
    send_req, recv_req = anyio.create_memory_object_stream[Any](1)
    send_rep, recv_rep = anyio.create_memory_object_stream[Any](1)

    async def server() -> None:
        async with recv_req, send_rep:
            async for msg in recv_req:
                await send_rep.send(msg)

    msg = Request(data=1)
    samples: list[int] = []
    clock = time.perf_counter_ns
    async with anyio.create_task_group() as tg:
        tg.start_soon(server)
        async with send_req, recv_rep:
            for i in range(warmup + n):
                t0 = clock()
                await send_req.send(msg)
                await recv_rep.receive()
                if i >= warmup:
                    samples.append(clock() - t0)
    return samples


async def _pdc_ask(n: int, warmup: int) -> list[int]:
    async def echo(msg: Any) -> Any:
        return msg

    msg = Request(data=1)
    samples: list[int] = []
    clock = time.perf_counter_ns
    async with open_nursery() as nursery:
        ref = await nursery.start_actor(echo, capacity=4096)
        for i in range(warmup + n):
            t0 = clock()
            await ref.ask(msg)
            if i >= warmup:
                samples.append(clock() - t0)
    return samples


def _runtime_round_trip(runtime_class: Any, msg: Any) -> LatencySampler:
    async def sample(n: int, warmup: int) -> list[int]:
        samples: list[int] = []
        clock = time.perf_counter_ns
        async with runtime_class(enable_telemetry=True) as runtime:
            await runtime.launch(_ECHO_KERNEL)
            await runtime.activate(_ECHO_KERNEL)
            for i in range(warmup + n):
                t0 = clock()
                await runtime.send(_ECHO_KERNEL, msg)
                await runtime.receive(_ECHO_KERNEL)
                if i >= warmup:
                    samples.append(clock() - t0)
        return samples

    return sample


@dataclass(frozen=True)
class LatencyPath:
    """A measured path: ``label`` on ``async_backend``, compared with ``baselines``."""

    async_backend: str
    label: str
    sampler: LatencySampler
    baselines: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.async_backend} / {self.label}"


BARE: Final = "bare anyio streams"
PYDOTCOMPUTE: Final = "PyDotCompute 0.2.0"


def latency_paths(async_backends: tuple[str, ...] = ("asyncio", "trio")) -> list[LatencyPath]:
    """Every latency path that can run here (PyDotCompute only if installed)."""
    pdc = _pydotcompute()
    paths: list[LatencyPath] = []
    for backend in async_backends:
        baselines = (BARE, PYDOTCOMPUTE) if pdc is not None else (BARE,)
        paths += [
            LatencyPath(backend, BARE, _bare_streams),
            LatencyPath(backend, "pdc ask", _pdc_ask, baselines),
            LatencyPath(
                backend,
                "pdc seed facade",
                _runtime_round_trip(RingKernelRuntime, Request(data=1)),
                baselines,
            ),
        ]
    if pdc is not None and "asyncio" in async_backends:

        @pdc.message
        class PdcRequest:
            data: Any = None

        paths.append(
            LatencyPath(
                "asyncio", PYDOTCOMPUTE, _runtime_round_trip(pdc.RingKernelRuntime, PdcRequest())
            )
        )
    return paths


# -- throughput paths -------------------------------------------------------------------------


class _BatchSink(Actor[Any, None]):
    def __init__(self) -> None:
        self.count = 0

    async def handle_batch(self, messages: list[Any]) -> list[None]:
        self.count += len(messages)
        return [None] * len(messages)


async def _pdc_tell_many(n: int) -> float:
    msgs = [Request(data=i) for i in range(n)]
    sink = _BatchSink()
    async with open_nursery() as nursery:
        ref = await nursery.start_actor(sink, capacity=4096, max_batch=1024)
        t0 = time.perf_counter()
        for start in range(0, n, 1024):
            await ref.tell_many(msgs[start : start + 1024])
        await ref.stop(drain=True)
        elapsed = time.perf_counter() - t0
    assert sink.count == n
    return n / elapsed


async def _pdc_ask_stream(n: int) -> float:
    async def echo(msg: Any) -> Any:
        return msg

    msgs = [Request(data=i) for i in range(n)]
    async with open_nursery() as nursery:
        ref = await nursery.start_actor(echo, capacity=4096)
        t0 = time.perf_counter()
        count = 0
        async for _ in ref.ask_stream(msgs, window=256):
            count += 1
        elapsed = time.perf_counter() - t0
    assert count == n
    return n / elapsed


def _runtime_streaming(runtime_class: Any, make: Callable[[int], Any]) -> ThroughputRunner:
    async def measure(n: int) -> float:
        msgs = [make(i) for i in range(n)]
        async with runtime_class(enable_telemetry=True) as runtime:
            await runtime.launch(_ECHO_KERNEL)
            await runtime.activate(_ECHO_KERNEL)
            t0 = time.perf_counter()
            window = 1024
            for start in range(0, n, window):
                chunk = msgs[start : start + window]
                for msg in chunk:
                    await runtime.send(_ECHO_KERNEL, msg)
                for _ in chunk:
                    await runtime.receive(_ECHO_KERNEL)
            elapsed = time.perf_counter() - t0
        return n / elapsed

    return measure


def throughput_paths(
    async_backends: tuple[str, ...] = ("asyncio", "trio"),
) -> list[tuple[str, str, ThroughputRunner]]:
    """(async backend, label, runner) for every throughput path that can run here."""
    out: list[tuple[str, str, ThroughputRunner]] = []
    for backend in async_backends:
        out += [
            (backend, "pdc tell_many -> handle_batch", _pdc_tell_many),
            (backend, "pdc ask_stream", _pdc_ask_stream),
            (
                backend,
                "pdc seed facade streaming",
                _runtime_streaming(RingKernelRuntime, lambda i: Request(data=i)),
            ),
        ]
    pdc = _pydotcompute()
    if pdc is not None and "asyncio" in async_backends:

        @pdc.message
        class PdcRequest:
            data: Any = None

        out.append(
            (
                "asyncio",
                f"{PYDOTCOMPUTE} streaming",
                _runtime_streaming(pdc.RingKernelRuntime, lambda i: PdcRequest(data=i)),  # type: ignore[call-arg]
            )
        )
    return out


async def measure_throughput(runner: ThroughputRunner, n: int) -> float:
    """Messages per second of one throughput path over ``n`` messages."""
    return await runner(n)


# -- the suite --------------------------------------------------------------------------------


def summarize(samples_ns: list[int]) -> dict[str, float]:
    """Percentiles (microseconds) of latency samples in nanoseconds."""
    data = np.asarray(samples_ns, dtype=np.float64) / 1e3
    p50, p90, p99 = np.percentile(data, [50, 90, 99])
    return {
        "n": float(data.size),
        "mean_us": float(data.mean()),
        "p50_us": float(p50),
        "p90_us": float(p90),
        "p99_us": float(p99),
        "min_us": float(data.min()),
        "max_us": float(data.max()),
    }


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
            backend = key.split(" / ", 1)[0]
            for baseline in self.baselines.get(key, ()):
                ref = self.latency_samples.get(f"{backend} / {baseline}") or (
                    self.latency_samples.get(f"asyncio / {baseline}")
                )
                if ref:
                    entry[f"p50_vs_{baseline}"] = entry["p50_us"] / summarize(ref)["p50_us"]
            latency[key] = entry
        throughput = {
            key: {"msgs_per_s": float(np.median(values)), "rounds": len(values)}
            for key, values in self.throughput.items()
            if values
        }
        return {
            "environment": _environment(),
            "settings": self.settings,
            "latency": latency,
            "throughput": throughput,
            "interrupted": self.interrupted,
        }


def _environment() -> dict[str, str]:
    env = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": str(os.cpu_count()),
    }
    for name in ("pdc-core", "anyio", "trio", "numpy", "pydotcompute"):
        try:
            env[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            env[name] = "not installed"
    return env


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
    for backend, label, _ in thr:
        result.throughput.setdefault(f"{backend} / {label}", [])
    for round_index in range(rounds):
        shift = round_index % len(lat)
        for path in lat[shift:] + lat[:shift]:
            gc.collect()
            samples = anyio.run(path.sampler, n, warmup, backend=path.async_backend)
            result.latency_samples[path.key] += samples
            if on_step:
                on_step(path.key)
        for backend, label, runner in thr:
            gc.collect()
            rate = anyio.run(measure_throughput, runner, throughput_n, backend=backend)
            result.throughput[f"{backend} / {label}"].append(rate)
            if on_step:
                on_step(f"{backend} / {label}")
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
            ratios or "(baseline)",
        )
    console.print(latency)
    throughput = Table(title="Throughput into one actor")
    throughput.add_column("path")
    throughput.add_column("msgs/s (median)", justify="right")
    for key, entry in payload["throughput"].items():
        throughput.add_row(key, f"{entry['msgs_per_s']:,.0f}")
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

    def on_step(key: str) -> None:
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
