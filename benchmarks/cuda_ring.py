"""The resident CUDA ring kernel against launching work per message, measured in one run.

Needs an NVIDIA GPU, CuPy and NVRTC (``pip install -e . -e plugins/pdc_cpu
-e 'plugins/pdc_cuda[nvrtc]'``). From the repository root::

    python benchmarks/cuda_ring.py                 # default run (about a minute)
    python benchmarks/cuda_ring.py --quick         # fewer messages
    python benchmarks/cuda_ring.py --markdown      # also print a section for docs/benchmarks.md
    python benchmarks/cuda_ring.py --json out.json # and the figures as JSON
    python benchmarks/cuda_ring.py --batched       # only the batched throughput (seconds)
    python benchmarks/cuda_ring.py --host          # that on pdc-cuda's host build, no GPU

On a machine without a usable GPU it refuses at once, saying why (exit status 2); with
``--host`` it needs the host build (g++ and NVRTC) instead, and its times say nothing
about a GPU.
A measurement that fails is reported (its cells say ``failed``, the error is printed)
and the others go on; the exit status is then 1. Measurements are run in order of
importance (the 8-byte row and the batched throughput first); one that would start
after ``--budget`` seconds is skipped and says so (``skipped``), so the run fits a GPU
session's time. A watchdog (``--timeout``, 600 s by default) dumps every thread's stack
and exits if the run hangs on the device.

What it measures, per payload size (the record size: 8 B .. 64 KiB; the kernels echo
the record, copying every byte on the device):

* **resident**: ``await session.request(record)`` through a resident ring kernel
  (``pdc_core.open_persistent_kernel``) -- host stores into mapped pinned memory, the
  kernel polls, replies come back through the output ring. Under asyncio with the
  default wait (sleeping in the event loop until the reply), under asyncio with
  ``wait="spin"`` (spinning on the reply index up to 100 us first), and under trio.
* **CuPy launch + copies**: what a CuPy program writes per message --
  ``cupy.asarray(host)``, a ``RawKernel`` launch doing the same echo, ``.get()`` -- on a
  non-blocking stream.
* **plain launch**: ``pdc_cuda.graphs.MessageLauncher(graph=False)``: the input copied
  into pinned staging, ``cudaMemcpyAsync`` in, the launch, ``cudaMemcpyAsync`` out, a
  wait for the stream.
* **graph replay**: ``MessageLauncher(graph=True)``: the same calls captured once into
  a CUDA graph and replayed per message.
* **cuda.bindings launch**: the lowest per-message launch cost Python has: the driver
  API of ``cuda.bindings`` (``cuMemcpyHtoDAsync``, ``cuLaunchKernel`` with the kernel's
  parameters packed once into a ``void*[]``, ``cuMemcpyDtoHAsync``,
  ``cuStreamSynchronize``) on pinned staging buffers, every result checked.

The launched variants wait synchronously for their stream (``cudaStreamSynchronize``,
no event loop): their best case, so the ratios against the resident kernel are
conservative. Plus the round trip at several idle back-offs of the kernel
(0/64/256/1024 ns, 8 B), and batched throughput (``request_batch`` of whole rings of
8-byte records, asyncio and trio). The batched throughput says what bounds it: a second
pass times the host's work per record (``ring_batch_host.HostPhases``: packing records
into the slots, stamping sequence words, publishing, collecting the replies) and prints
it as a share of that pass; the rest is the device and the wait for it. Round trips
are reported as p50/p99 in microseconds; ratios are of medians measured in the same
run. Targets (issues 12 and 24, H100/H200): resident p50 <= 5 us with ``wait="spin"``
and <= 10 us without, at least 5x faster than CuPy launch + copies and 2x faster than
the cuda.bindings launch, batched >= 100 M records/s.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import faulthandler
import functools
import json
import platform
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

import numpy as np

# The launch paths and the echo kernel are pdc-cuda's, shared with `pdc bench --backend
# cuda`; without pdc-cuda, refuse_without_gpu() says what is missing.
with contextlib.suppress(ImportError):
    from pdc_cuda._bench import ECHO_KERNEL, bindings_echo, echo_launcher, echo_threads

sys.path.insert(0, str(Path(__file__).resolve().parent))  # also when loaded by path
from ring_batch_host import HostPhases

PAYLOADS = {"8 B": 8, "64 B": 64, "512 B": 512, "4 KiB": 4096, "64 KiB": 65536}
BACKOFFS = (0, 64, 256, 1024)
LIBRARIES = ("asyncio", "trio")
#: Records per request_batch in the throughput measurement (one whole ring).
BATCH_CAPACITY = 1 << 16
#: The targets of issue 12 for an H100/H200.
TARGET_P50_SPIN_US = 5.0
TARGET_P50_US = 10.0
TARGET_SPEEDUP = 5.0
TARGET_BINDINGS_SPEEDUP = 2.0
TARGET_BATCHED = 100e6
#: The columns of the round-trip table, in order.
RESIDENT = "resident (asyncio)"
RESIDENT_SPIN = "resident, spin (asyncio)"
RESIDENT_TRIO = "resident (trio)"
CUPY = "CuPy launch + copies"
PLAIN = "plain launch"
GRAPH = "graph replay"
BINDINGS = "cuda.bindings launch"
#: The columns launched per message, in order.
LAUNCHED = (CUPY, PLAIN, GRAPH, BINDINGS)
Wait = Literal["sleep", "spin"]
#: (column, wait, event loop) of the resident measurements.
RESIDENT_COLUMNS: tuple[tuple[str, Wait, str], ...] = (
    (RESIDENT, "sleep", "asyncio"),
    (RESIDENT_SPIN, "spin", "asyncio"),
    (RESIDENT_TRIO, "sleep", "trio"),
)

T = TypeVar("T")

ECHO_BODY = """
__device__ int pdc_body(const pdc_request& request, pdc_reply& reply) {
    const unsigned long long* src = reinterpret_cast<const unsigned long long*>(&request);
    unsigned long long* dst = reinterpret_cast<unsigned long long*>(&reply);
    for (unsigned int i = 0; i < sizeof(pdc_request) / 8; ++i) dst[i] = src[i];
    return 0;
}
"""

#: Point = (p50 us, p99 us), or a string saying why there is none ("failed", "skipped").
Point = tuple[float, float] | str


def record_dtype(size: int) -> np.dtype[Any]:
    """A record of exactly ``size`` bytes (a multiple of 8): an id and payload words."""
    if size == 8:
        return np.dtype([("id", "<u8")])
    return np.dtype([("id", "<u8"), ("payload", "<u8", ((size - 8) // 8,))])


def percentiles(samples_s: list[float]) -> tuple[float, float]:
    ordered = sorted(samples_s)
    p50 = ordered[len(ordered) // 2]
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return p50 * 1e6, p99 * 1e6


def refuse_without_gpu(script: str = "cuda_ring.py") -> Any:
    """The cuda backend, or exit 2 with the reason it is unavailable (``script`` names
    the benchmark in the message)."""
    try:
        from pdc_cuda import CudaBackend

        import pdc_core
    except ImportError as exc:
        sys.exit(f"{script} needs pdc-core and pdc-cuda installed: {exc}")
    availability = CudaBackend.availability()
    if not availability.available:
        print(
            f"{script} needs an NVIDIA GPU: the cuda backend is unavailable here: "
            f"{availability.reason}.\nRun it on a machine with a GPU (see the module docstring).",
            file=sys.stderr,
        )
        sys.exit(2)
    return pdc_core.get_backend("cuda")


# -- resident kernel ----------------------------------------------------------------------


def echo_kernel(name: str, dtype: np.dtype[Any], capacity: int) -> Any:
    """The persistent kernel every resident measurement runs: echo the record."""
    from pdc_core import PersistentKernel

    kernel = PersistentKernel(name, dtype, dtype, capacity=capacity)
    kernel.add_body("cuda", ECHO_BODY)
    return kernel


def launch_options(threads: int, backoff: tuple[int, int] | None = None) -> dict[str, Any]:
    """Options for ``open_persistent_kernel`` on the cuda backend."""
    options: dict[str, Any] = {"threads": threads}
    if backoff is not None:
        options["backoff_min_ns"], options["backoff_max_ns"] = backoff
    return options


def resident_round_trips(
    backend: Any,
    size: int,
    count: int,
    library: str,
    backoff: tuple[int, int] | None = None,
    wait: Wait = "sleep",
) -> list[float]:
    """Per-message round trips of ``session.request`` through a resident echo kernel."""
    import anyio

    from pdc_core import open_persistent_kernel

    dtype = record_dtype(size)
    kernel = echo_kernel(f"echo{size}", dtype, 64)
    options = launch_options(32, backoff)
    record = np.zeros((), dtype)
    samples: list[float] = []

    async def main() -> None:
        async with open_persistent_kernel(kernel, backend, wait=wait, **options) as session:
            for _ in range(min(200, count)):  # warm up
                await session.request(record)
            clock = time.perf_counter
            for i in range(count):
                record["id"] = i
                start = clock()
                reply = await session.request(record)
                samples.append(clock() - start)
                if int(reply["id"]) != i:
                    raise AssertionError(f"reply {int(reply['id'])} to request {i}")

    anyio.run(main, backend=library)
    return samples


def resident_throughput(
    backend: Any,
    library: str,
    batches: int,
    capacity: int = BATCH_CAPACITY,
    options: dict[str, Any] | None = None,
) -> dict[str, float]:
    """``request_batch`` of whole rings of 8-byte records: the rate, and what bounds it.

    A timed pass of ``batches`` batches gives ``records_per_s`` (and ``batch_ns``, per
    record); then a pass as long with the host's phases timed (``ring_batch_host.HostPhases``
    on the session's ring) gives, in ns per record, ``pack`` (records into the slots),
    ``stamp`` (their sequence words), ``publish`` (the rest of the write), ``collect``
    (the replies copied out, slots released), their sum ``host``, the pass's own
    ``pass_ns``, ``host_share`` (``host / pass_ns``: the rest is the device and the
    wait for it) and ``collections_per_batch`` (pumps that moved replies: how finely
    the device's replies arrive). ``options`` go to ``open_persistent_kernel``
    (default: 1024 threads).
    """
    import anyio

    from pdc_core import open_persistent_kernel

    dtype = record_dtype(8)
    kernel = echo_kernel("echo-batched", dtype, capacity)
    batch = np.zeros(capacity, dtype)
    batch["id"] = np.arange(capacity)
    figures: dict[str, float] = {}
    records = batches * capacity

    async def main() -> None:
        launch = launch_options(1024) if options is None else options
        async with open_persistent_kernel(kernel, backend, **launch) as session:
            replies = await session.request_batch(batch)  # warm up
            if not np.array_equal(replies["id"], batch["id"]):
                raise AssertionError("the batched echo returned other records")
            start = time.perf_counter()
            for _ in range(batches):
                await session.request_batch(batch)
            elapsed = time.perf_counter() - start
            phases = HostPhases(session.resident.ring)
            try:
                start = time.perf_counter()
                for _ in range(batches):
                    await session.request_batch(batch)
                timed = time.perf_counter() - start
            finally:
                phases.remove()
        figures["records_per_s"] = records / elapsed
        figures["batch_ns"] = elapsed * 1e9 / records
        figures.update(phases.per_record_ns(records))
        figures["host"] = figures["write"] + figures["collect"]
        figures["pass_ns"] = timed * 1e9 / records
        figures["host_share"] = figures["host"] / figures["pass_ns"]
        figures["collections_per_batch"] = phases.collections / batches

    anyio.run(main, backend=library)
    return figures


def describe_batched(figures: dict[str, float] | str) -> str:
    """One line: the rate, and the host's share of a batch by phase."""
    if isinstance(figures, str):
        return figures
    return (
        f"{figures['records_per_s'] / 1e6:.2f} M records/s ({figures['batch_ns']:.2f} ns a "
        f"record); the host's work in a pass of its own: {figures['host']:.2f} of "
        f"{figures['pass_ns']:.2f} ns a record ({figures['host_share']:.0%}: pack "
        f"{figures['pack']:.2f}, stamp {figures['stamp']:.2f}, publish "
        f"{figures['publish']:.2f}, collect {figures['collect']:.2f} in "
        f"{figures['collections_per_batch']:.1f} collections a batch); the rest is the "
        "device and the wait for it"
    )


# -- work launched per message ------------------------------------------------------------------


def cupy_round_trips(backend: Any, size: int, count: int) -> list[float]:
    """Per message what a CuPy program writes: ``cupy.asarray``, a launch, ``.get()``."""
    import cupy

    words = size // 8
    kernel = backend.compile_kernel(ECHO_KERNEL, "echo")
    host = np.arange(words, dtype=np.uint64)
    block = (echo_threads(words),)
    n = np.uint64(words)
    with backend.device_context():
        stream = cupy.cuda.Stream(non_blocking=True)
        with stream:

            def once() -> Any:
                src = cupy.asarray(host)
                dst = cupy.empty_like(src)
                kernel.raw((1,), block, (src, dst, n))
                return dst.get()  # waits for the stream

            return timed(once, host, count)


def launcher_round_trips(launcher: Any, size: int, count: int) -> list[float]:
    """Per-message round trips through ``launcher`` (an ``echo`` MessageLauncher); closes it."""
    from pdc_cuda.graphs import In, Out

    words = size // 8
    host = np.arange(words, dtype=np.uint64)
    result = Out((words,), np.uint64)
    n = np.uint64(words)
    with launcher:
        return timed(lambda: launcher(In(host), result, n)[0], host, count)


def bindings_round_trips(backend: Any, size: int, count: int) -> list[float]:
    """Per message through :class:`~pdc_cuda._bench.PrePackedLaunch`: the CuPy-compiled
    ``echo`` launched by its ``CUfunction`` handle, device and pinned memory from CuPy, a
    non-blocking stream (``pdc_cuda._bench.bindings_echo``)."""
    host = np.arange(size // 8, dtype=np.uint64)
    with bindings_echo(backend, size) as launch:
        return timed(lambda: launch(host), host, count)


def timed(once: Callable[[], Any], expected: Any, count: int) -> list[float]:
    """``count`` timings of ``once()`` after a warm-up; its last result must be ``expected``."""
    for _ in range(min(200, count)):
        once()
    samples = []
    clock = time.perf_counter
    result: Any = None
    for _ in range(count):
        start = clock()
        result = once()
        samples.append(clock() - start)
    if not np.array_equal(result, expected):
        raise AssertionError("the echo kernel did not copy the payload")
    return samples


def per_message_round_trips(backend: Any, size: int, count: int, column: str) -> list[float]:
    """The launched column ``column`` (one of ``LAUNCHED``) for ``size``-byte messages."""
    if column == CUPY:
        return cupy_round_trips(backend, size, count)
    if column == BINDINGS:
        return bindings_round_trips(backend, size, count)
    return launcher_round_trips(echo_launcher(backend, size, column == GRAPH), size, count)


# -- report ----------------------------------------------------------------------------------


def environment(backend: Any) -> dict[str, Any]:
    import cupy
    from pdc_cuda._availability import format_cuda_version

    props = backend.properties
    runtime = cupy.cuda.runtime
    return {
        "date": datetime.date.today().isoformat(),
        "device": f"{props.name} (compute capability {props.compute_capability}, "
        f"{props.multiprocessor_count} SMs)",
        "driver": format_cuda_version(runtime.driverGetVersion()),
        "cuda_runtime": format_cuda_version(runtime.runtimeGetVersion()),
        "cupy": cupy.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "host": platform.processor() or platform.machine(),
    }


class Measurements:
    """Runs measurements in order, recording the ones that fail instead of stopping the
    run, and skipping (saying so) those that would start after the time budget."""

    def __init__(self, budget_s: float) -> None:
        self.deadline = time.monotonic() + budget_s if budget_s > 0 else float("inf")
        self.errors: list[str] = []
        self.skipped: list[str] = []

    def run(self, label: str, measure: Callable[[], T]) -> T | str:
        """``measure()``, or ``"failed"``/``"skipped"``."""
        if time.monotonic() >= self.deadline:
            self.skipped.append(label)
            print(f"skipped {label}: over the time budget", file=sys.stderr)
            return "skipped"
        started = time.monotonic()
        try:
            return measure()
        except Exception as exc:
            self.errors.append(f"{label}: {type(exc).__name__}: {exc}")
            print(f"FAILED {label}:", file=sys.stderr)
            traceback.print_exc()
            return "failed"
        finally:
            print(f"  ({label}: {time.monotonic() - started:.1f} s)", file=sys.stderr)

    def point(self, label: str, measure: Callable[[], list[float]]) -> Point:
        samples = self.run(label, measure)
        return samples if isinstance(samples, str) else percentiles(samples)


def cell(point: Point | None) -> str:
    if point is None:
        return "n/a"
    return point if isinstance(point, str) else f"{point[0]:.1f} / {point[1]:.1f}"


def ratio(numerator: Point | None, denominator: Point | None) -> str:
    """``numerator`` p50 / ``denominator`` p50, or ``n/a``."""
    value = p50_ratio(numerator, denominator)
    return "n/a" if value is None else f"{value:.1f}x"


def p50_ratio(numerator: Point | None, denominator: Point | None) -> float | None:
    if isinstance(numerator, tuple) and isinstance(denominator, tuple):
        return numerator[0] / denominator[0]
    return None


def targets(results: dict[str, Any]) -> list[str]:
    """The targets of issue 12, each with the figure measured and met / missed."""
    lines = []
    small = results["round_trip_us"].get("8 B", {})
    resident, spin, cupy = small.get(RESIDENT), small.get(RESIDENT_SPIN), small.get(CUPY)
    for point, limit, how in ((spin, TARGET_P50_SPIN_US, 'wait="spin"'),
                              (resident, TARGET_P50_US, "the default wait")):  # fmt: skip
        if isinstance(point, tuple):
            verdict = "met" if point[0] <= limit else "missed"
            lines.append(
                f"resident round trip p50 <= {limit:g} us with {how} (8 B, asyncio): "
                f"{point[0]:.1f} us, {verdict}"
            )
    for point, how in ((resident, "the default wait"), (spin, 'wait="spin"')):
        speedup = p50_ratio(cupy, point)
        if speedup is not None:
            verdict = "met" if speedup >= TARGET_SPEEDUP else "missed"
            lines.append(
                f">= {TARGET_SPEEDUP:g}x faster than CuPy launch + copies (8 B, resident with "
                f"{how}): {speedup:.1f}x, {verdict}"
            )
    rates = [rate for rate in results["batched_records_per_s"].values() if isinstance(rate, float)]
    if rates:
        best = max(rates)
        verdict = "met" if best >= TARGET_BATCHED else "missed"
        lines.append(
            f"batched >= {TARGET_BATCHED / 1e6:g} M records/s (8-byte records): "
            f"{best / 1e6:.2f} M records/s, {verdict}"
        )
    for point, how in ((resident, "the default wait"), (spin, 'wait="spin"')):
        speedup = p50_ratio(small.get(BINDINGS), point)
        if speedup is not None:
            verdict = "met" if speedup >= TARGET_BINDINGS_SPEEDUP else "missed"
            lines.append(
                f">= {TARGET_BINDINGS_SPEEDUP:g}x faster than the cuda.bindings launch (8 B, "
                f"resident with {how}): {speedup:.1f}x, {verdict}"
            )
    graph_vs_plain = p50_ratio(small.get(GRAPH), small.get(PLAIN))
    if graph_vs_plain is not None:
        lines.append(f"(no target) graph replay / plain launch p50 (8 B): {graph_vs_plain:.2f}x")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer messages per point")
    parser.add_argument("--markdown", action="store_true", help="print a docs section")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument(
        "--budget",
        type=float,
        default=80.0,
        help="seconds after which measurements not yet started are skipped (0: no limit)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        help="seconds before a hung run dumps its stacks and exits (0: no watchdog)",
    )
    parser.add_argument(
        "--batched",
        action="store_true",
        help="only the batched throughput and the host's share of it (seconds)",
    )
    parser.add_argument(
        "--host",
        action="store_true",
        help="on pdc-cuda's host build, without a GPU (implies --batched; its times say "
        "nothing about a GPU)",
    )
    args = parser.parse_args(argv)
    backend = host_build() if args.host else refuse_without_gpu()
    if args.timeout > 0:
        faulthandler.dump_traceback_later(args.timeout, exit=True, file=sys.stderr)
    try:
        return run_batched(backend, args) if args.batched or args.host else run(backend, args)
    finally:
        faulthandler.cancel_dump_traceback_later()


def round_trip_row(
    backend: Any, measurements: Measurements, label: str, size: int, count: int
) -> dict[str, Point]:
    """Every column of one payload size."""
    n = count if size <= 4096 else max(100, count // 10)
    point: dict[str, Point] = {}
    for column, wait, library in RESIDENT_COLUMNS:
        point[column] = measurements.point(
            f"{column} {label}",
            functools.partial(resident_round_trips, backend, size, n, library, wait=wait),
        )
    for column in LAUNCHED:
        point[column] = measurements.point(
            f"{column} {label}",
            functools.partial(per_message_round_trips, backend, size, n, column),
        )
    print(f"{label}: " + ", ".join(f"{k} p50/p99 {cell(v)} us" for k, v in point.items()))
    return point


def batched(
    backend: Any,
    measurements: Measurements,
    results: dict[str, Any],
    batches: int,
    options: dict[str, Any] | None = None,
) -> None:
    """The batched throughput under each event loop, with the host's share of it, into
    ``results`` (``batched_records_per_s``, ``batched_host_ns_per_record``); then the
    same with plain input slots (``batched_plain_slots``), and the ratio of the two
    rates (``batched_sequenced_over_plain``)."""
    figures: dict[str, dict[str, float] | str] = {
        library: measurements.run(
            f"batched ({library})",
            functools.partial(resident_throughput, backend, library, batches, options=options),
        )
        for library in LIBRARIES
    }
    results["batched_records_per_s"] = {
        library: found if isinstance(found, str) else found["records_per_s"]
        for library, found in figures.items()
    }
    results["batched_host_ns_per_record"] = figures
    for library, found in figures.items():
        print(f"batched ({library}): {describe_batched(found)}")
    plain: dict[str, dict[str, float] | str] = {}
    for library in LIBRARIES:
        with plain_slots(backend):
            plain[library] = measurements.run(
                f"batched, plain slots ({library})",
                functools.partial(resident_throughput, backend, library, batches, options=options),
            )
    results["batched_plain_slots"] = plain
    ratios: dict[str, float | str] = {}
    for library, found in plain.items():
        sequenced = figures[library]
        if isinstance(found, str) or isinstance(sequenced, str):
            ratios[library] = "n/a"
        else:
            ratios[library] = sequenced["records_per_s"] / found["records_per_s"]
        ratio = ratios[library]
        shown = ratio if isinstance(ratio, str) else f"{ratio:.2f}x"
        print(
            f"batched ({library}), plain input slots: {describe_batched(found)}; "
            f"sequenced / plain: {shown}"
        )
    results["batched_sequenced_over_plain"] = ratios


@contextlib.contextmanager
def plain_slots(backend: Any) -> Any:
    """``backend`` laying out input rings without sequence words while inside: the
    kernel then finds requests by ``IN_HEAD`` alone and reads each slot once, and the
    host stamps nothing. Against the default (sequenced slots, each request's word
    acquired on its own), it shows what the sequence words cost a batch."""
    backend.ring_sequenced_input = False
    try:
        yield backend
    finally:
        del backend.ring_sequenced_input


#: Launch options on the host build: a block of two CPU threads (a small machine's
#: cores) that spin between polls (its ``__nanosleep`` sleeps for the OS's granularity).
HOST_OPTIONS: dict[str, Any] = {"threads": 2, "backoff_min_ns": 0, "backoff_max_ns": 0}


def host_build(script: str = "cuda_ring.py", **options: Any) -> Any:
    """pdc-cuda's host build (the ring kernel on CPU threads; ``options`` for
    ``HostCudaBackend``), or exit 2 saying why not (``script`` names the benchmark)."""
    try:
        from pdc_cuda.testing import HostCudaBackend
    except ImportError as exc:
        sys.exit(f"{script} --host needs pdc-core and pdc-cuda installed: {exc}")
    availability = HostCudaBackend.availability()
    if not availability.available:
        print(f"{script} --host: no host build: {availability.reason}", file=sys.stderr)
        sys.exit(2)
    return HostCudaBackend(**options)


def run_batched(backend: Any, args: argparse.Namespace) -> int:
    """``--batched``: the batched throughput and the host's share of it, alone."""
    measurements = Measurements(args.budget)
    host = bool(getattr(args, "host", False))
    results: dict[str, Any] = {
        "environment": {
            "date": datetime.date.today().isoformat(),
            "device": f"{backend!r} (the host build: times say nothing about a GPU)",
            "numpy": np.__version__,
            "python": platform.python_version(),
            "host": platform.processor() or platform.machine(),
        }
        if host
        else environment(backend)
    }
    batched(backend, measurements, results, 5 if args.quick else 50, HOST_OPTIONS if host else None)
    results["failures"] = measurements.errors
    results["skipped"] = measurements.skipped
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=2)
    for error in measurements.errors:
        print(f"FAILED {error}", file=sys.stderr)
    return 1 if measurements.errors else 0


def run(backend: Any, args: argparse.Namespace) -> int:
    measurements = Measurements(getattr(args, "budget", 0.0))
    count = 500 if args.quick else 5000
    results: dict[str, Any] = {"environment": environment(backend), "round_trip_us": {}}
    # In order of importance: the 8-byte row and the batched throughput carry the targets.
    first, *rest = PAYLOADS
    results["round_trip_us"][first] = round_trip_row(
        backend, measurements, first, PAYLOADS[first], count
    )
    batched(backend, measurements, results, 5 if args.quick else 50)
    for label in rest:
        results["round_trip_us"][label] = round_trip_row(
            backend, measurements, label, PAYLOADS[label], count
        )
    backoffs: dict[str, Point] = {}
    for ns in BACKOFFS:
        backoffs[f"{ns} ns"] = measurements.point(
            f"back-off {ns} ns",
            functools.partial(
                resident_round_trips, backend, 8, count, "asyncio", backoff=(ns, max(ns, 64))
            ),
        )
        print(f"back-off {ns} ns: p50/p99 {cell(backoffs[f'{ns} ns'])} us")
    results["backoff_round_trip_us"] = backoffs
    results["targets"] = targets(results)
    results["failures"] = measurements.errors
    results["skipped"] = measurements.skipped
    for line in results["targets"]:
        print(f"target: {line}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=2)
    if args.markdown:
        print_markdown(results)
    if measurements.skipped:
        print(f"\n{len(measurements.skipped)} measurement(s) skipped (time budget; --budget)")
    if measurements.errors:
        print(f"\n{len(measurements.errors)} measurement(s) failed:", file=sys.stderr)
        for error in measurements.errors:
            print(f"  {error}", file=sys.stderr)
        return 1
    return 0


COLUMNS = (RESIDENT, RESIDENT_SPIN, RESIDENT_TRIO, *LAUNCHED)
#: (heading, numerator, denominator) of the ratio columns.
RATIOS = (
    ("CuPy / resident", CUPY, RESIDENT),
    ("CuPy / resident spin", CUPY, RESIDENT_SPIN),
    ("graph / plain", GRAPH, PLAIN),
    ("graph / resident", GRAPH, RESIDENT),
    ("bindings / resident", BINDINGS, RESIDENT),
    ("bindings / resident spin", BINDINGS, RESIDENT_SPIN),
    ("trio / asyncio", RESIDENT_TRIO, RESIDENT),
)


def print_markdown(results: dict[str, Any]) -> None:
    env = results["environment"]
    print("\n## CUDA resident ring kernel\n")
    print(f"- Date: {env['date']}")
    print(f"- Device: {env['device']}; driver CUDA {env['driver']}, runtime {env['cuda_runtime']}")
    print(f"- Versions: Python {env['python']}, NumPy {env['numpy']}, CuPy {env['cupy']}")
    print("- Command: `python benchmarks/cuda_ring.py --markdown`\n")
    print(
        "Round trip p50 / p99 (us) per message, one record echoed on the device. The "
        "launched columns wait synchronously for their stream. Ratio columns, by p50.\n"
    )
    print("| payload | " + " | ".join(COLUMNS) + " | " + " | ".join(r[0] for r in RATIOS) + " |")
    print("| --- |" + " ---: |" * (len(COLUMNS) + len(RATIOS)))
    for label, point in results["round_trip_us"].items():
        cells = [cell(point.get(column)) for column in COLUMNS]
        cells += [ratio(point.get(num), point.get(den)) for _, num, den in RATIOS]
        print(f"| {label} | " + " | ".join(cells) + " |")
    print(
        "\nIdle back-off of the kernel (8 B, asyncio), p50 / p99 (us): "
        + ", ".join(
            f"{name}: {cell(point)}" for name, point in results["backoff_round_trip_us"].items()
        )
    )
    print(f"\nBatched throughput (request_batch of {BATCH_CAPACITY} 8-byte records):\n")
    for library, found in results["batched_host_ns_per_record"].items():
        print(f"- {library}: {describe_batched(found)}")
    if results.get("targets"):
        print("\nTargets (issues 12 and 24):\n")
        for line in results["targets"]:
            print(f"- {line}")
    if results.get("failures"):
        print("\nFailed measurements:\n")
        for error in results["failures"]:
            print(f"- {error}")
    if results.get("skipped"):
        print("\nSkipped (time budget): " + ", ".join(results["skipped"]))


if __name__ == "__main__":
    sys.exit(main())
