"""Where a resident kernel should run: a green context, a second context, or the primary one.

Needs an NVIDIA GPU, CuPy, NVRTC and ``cuda-bindings``. From the repository root::

    python benchmarks/cuda_contexts.py                  # every placement (about a minute)
    python benchmarks/cuda_contexts.py --quick          # fewer round trips
    python benchmarks/cuda_contexts.py --markdown       # also print a docs section
    python benchmarks/cuda_contexts.py --json out.json  # and the figures as JSON
    python benchmarks/cuda_contexts.py --host --quick   # the dry run on the host build

On a machine without a usable GPU it refuses at once, saying why (exit status 2). A
watchdog (``--timeout``) dumps every thread's stack and exits if the run hangs.

For each placement of the resident kernel (``--placements``; default ``own,green,shared``:
``context=`` of ``open_persistent_kernel``), side by side in one run:

* **launch**: the time to make the kernel resident (the first launch in a context pdc
  owns includes making the context);
* **idle round trip**: p50/p99 of ``await session.request`` of an 8-byte record with
  nothing else on the GPU;
* **beside user kernels**: the same while a thread keeps the primary context busy with a
  loop of kernels (each a short spin on every SM, launched in groups and waited for),
  and the rate of those user kernels beside the resident kernel against their rate with
  no kernel resident (measured first): the cost of time-slicing, both ways;
* **beside, does it return**: with the kernel resident, in a worker thread with a
  deadline (``--deadline``): CuPy's first use of an op, ``compile_kernel`` + launch of a
  new source, ``cudaFreeHost`` of pinned memory, ``backend.synchronize()``. Each cell
  says ``N ms``, ``refused`` (pdc raised ``ResidentKernelBlocks`` at once: the shared
  placement) or ``blocked`` (no return within the deadline; the thread finishes once the
  kernel stops). In the shared placement the operations pdc cannot refuse (CuPy's load,
  a free outside pdc) are not run: they block there (measured on the first GPU run).

The green context decides the default: if work in the primary context loads modules and
runs concurrently with a kernel resident in a green context (no ``blocked`` cell, user
kernels at full rate), it is the better mechanism; otherwise the ordinary second
context stays the default. The ratio "own idle p50 / shared idle p50" is the cost of a
context of its own when nothing else runs (target: within 10%).

``--host`` is the dry run (``PDC_FIGURES_HOST=1 bash benchmarks/gpu_figures.sh``): the
same measuring code, placements, cells, deadlines, table, ratios and watchdog on pdc-cuda's
host build (``pdc_cuda.testing.HostCudaBackend``: the real cuda backend, its device two
CPU threads running the g++ build of the ring kernel), so that what fails there does not
fail on the GPU. What differs is behind one seam (:class:`Rig`: the backend, the user
loop, the beside operations, the environment). The host build compiles only ring
kernels and has no CuPy, so the user loop is a thread hashing a buffer (hashlib releases
the GIL), ``compile + launch`` compiles a copy of pdc-cuda's floor kernel new to the
backend and makes one round trip through it, ``cudaFreeHost`` is
``backend.free_cached_memory()``, and CuPy's first op is not run (its cell says why). In
the shared placement pdc refuses the compile and the free there as on a GPU (``refused``).
Its times say nothing about a GPU.
"""

from __future__ import annotations

import abc
import argparse
import datetime
import faulthandler
import hashlib
import json
import platform
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # also when loaded by path
from cuda_ring import host_build, percentiles, refuse_without_gpu

PLACEMENTS = ("own", "green", "shared")
REQUEST = np.dtype([("id", "<u8"), ("x", "<f8")], align=True)
ECHO_BODY = """
__device__ int pdc_body(const pdc_request& request, pdc_reply& reply) {
    reply.id = request.id;
    reply.x = request.x;
    return 0;
}
"""
#: A user kernel: every block spins for ``cycles`` clock cycles (work the GPU must run).
SPIN = (
    'extern "C" __global__ void pdc_bench_spin(long long cycles) {'
    "  long long start = clock64(); while (clock64() - start < cycles) { } }"
)
#: The beside-a-resident-kernel operations, in the order they are tried.
OPERATIONS = ("cupy first op", "compile + launch", "cudaFreeHost", "synchronize")
#: Those pdc cannot refuse in the shared placement of a GPU (they would block the worker).
UNREFUSABLE = ("cupy first op", "cudaFreeHost")

#: What the beside operations of one placement are: each a call to try, or the cell to
#: report without trying it (why it is not run).
Operations = dict[str, Callable[[], None] | str]


def echo_kernel() -> Any:
    from pdc_core import PersistentKernel

    kernel = PersistentKernel("contexts_echo", REQUEST, REQUEST, capacity=64)
    kernel.add_body("cuda", ECHO_BODY)
    return kernel


class UserLoop(abc.ABC):
    """A thread doing user work in groups (:meth:`_run`, counting :attr:`launched`) until
    stopped: what a resident kernel runs beside."""

    def __init__(self) -> None:
        self.launched = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @abc.abstractmethod
    def _run(self) -> None:
        """Work in groups, adding each group's size to :attr:`launched`, until stopped."""

    def rate(self, seconds: float) -> float:
        """Units of user work per second over ``seconds`` (nothing else measured meanwhile)."""
        self.start()
        time.sleep(seconds)
        return self.stop() / seconds

    def start(self) -> None:
        self.launched = 0
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="user-work", daemon=True)
        self._thread.start()

    def stop(self) -> int:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return self.launched


class SpinKernels(UserLoop):
    """Keeps the primary context busy: groups of spin kernels over every SM, each group
    waited for (the wait releases the GIL)."""

    def __init__(self, backend: Any, cycles: int = 20_000, group: int = 20) -> None:
        super().__init__()
        self.backend = backend
        self.cycles = cycles
        self.group = group
        self.kernel = backend.compile_kernel(SPIN, "pdc_bench_spin")  # before any residency
        self.blocks = backend.properties.multiprocessor_count or 1

    def _run(self) -> None:
        stream = self.backend.create_stream()
        try:
            while not self._stop.is_set():
                for _ in range(self.group):
                    self.kernel.launch(
                        (self.blocks,), (32,), (np.int64(self.cycles),), stream=stream
                    )
                stream.synchronize()
                self.launched += self.group
        finally:
            stream.close()


class HostWork(UserLoop):
    """The host build's user loop: groups of SHA-256 digests of a buffer, which hashlib
    computes with the GIL released (as a GPU wait releases it), competing with the
    kernel's CPU threads as user kernels compete with a resident one for SMs."""

    def __init__(self, nbytes: int = 1 << 16, group: int = 20) -> None:
        super().__init__()
        self.buffer = bytes(nbytes)
        self.group = group

    def _run(self) -> None:
        while not self._stop.is_set():
            for _ in range(self.group):
                hashlib.sha256(self.buffer).digest()
            self.launched += self.group


class Rig:
    """What a run measures with: the one seam between the GPU run and the host dry run.

    :func:`measure_placement` is the same for both; a rig gives it the backend, the
    user loop, the beside operations of a placement (every name of :data:`OPERATIONS`),
    the environment, and how long and how many to measure. This one is the GPU's.
    """

    #: Round trips of each measurement (with ``--quick``: :attr:`quick_rounds`).
    rounds = 3000
    quick_rounds = 500
    #: The shortest window of a user-rate measurement (seconds).
    rate_seconds = 1.0

    def __init__(self, backend: Any) -> None:
        self.backend = backend

    def user_loop(self) -> UserLoop:
        return SpinKernels(self.backend)

    def operations(self, placement: str) -> Operations:
        """The beside operations of ``placement``, each new to the process."""
        import cupy

        backend = self.backend
        token = uuid.uuid4().hex[:12]

        def cupy_first_op() -> None:
            op = cupy.ElementwiseKernel("float32 x", "float32 y", "y = x + 1.0f", f"ctx_{token}")
            out = cupy.asnumpy(op(cupy.arange(8, dtype=cupy.float32)))
            assert out.tolist() == [float(i + 1) for i in range(8)]

        def compile_and_launch() -> None:
            name = f"ctx_add_{token}"
            source = f'extern "C" __global__ void {name}(float* x) {{ x[threadIdx.x] += 1.0f; }}'
            data = backend.to_device(np.zeros(32, np.float32))
            backend.launch_kernel(backend.compile_kernel(source, name), (1,), (32,), (data,))
            assert backend.to_host(data).tolist() == [1.0] * 32

        def free_host() -> None:
            pinned = cupy.cuda.PinnedMemory(1 << 20)  # not pooled: its del is cudaFreeHost
            del pinned

        operations: Operations = {
            "cupy first op": cupy_first_op,
            "compile + launch": compile_and_launch,
            "cudaFreeHost": free_host,
            "synchronize": backend.synchronize,
        }
        if placement == "shared":  # measured on the first GPU run: they block there
            operations.update(dict.fromkeys(UNREFUSABLE, "not run (blocks)"))
        return operations

    def environment(self) -> dict[str, Any]:
        import cupy

        props = self.backend.properties
        driver = cupy.cuda.runtime.driverGetVersion()
        return {
            "date": datetime.date.today().isoformat(),
            "gpu": props.name,
            "sms": props.multiprocessor_count,
            "driver_cuda": f"{driver // 1000}.{driver % 1000 // 10}",
            "cupy": cupy.__version__,
            "numpy": np.__version__,
            "python": platform.python_version(),
        }


class HostRig(Rig):
    """The dry run's rig: pdc-cuda's host build (see the module documentation)."""

    rounds = 200
    quick_rounds = 50
    rate_seconds = 0.2

    def __init__(self, backend: Any) -> None:
        from pdc_cuda.testing import PlannedBuild, kernel_builds, prebuild

        super().__init__(backend)
        # g++ builds the kernels now, on every core, not in a launch or under a cell's
        # deadline: those then time pdc's compile (of a module new to the backend:
        # refused in shared), load and launch, not g++.
        floors = [PlannedBuild(self.floor_source(placement)) for placement in PLACEMENTS]
        prebuild([*kernel_builds(echo_kernel()), *floors])

    @staticmethod
    def floor_source(placement: str) -> str:
        """pdc-cuda's floor kernel, a module new to the backend in each placement (the
        same in every run: the host build's cache keeps it)."""
        from pdc_cuda._bench import FLOOR_SOURCE

        return f"{FLOOR_SOURCE}// cuda_contexts.py --host: new in the {placement} placement\n"

    def user_loop(self) -> UserLoop:
        return HostWork()

    def operations(self, placement: str) -> Operations:
        from pdc_cuda._bench import MappedFloor

        backend = self.backend
        source = self.floor_source(placement)

        def compile_and_launch() -> None:
            floor = MappedFloor(backend, 8, source=source)
            with floor.resident(8, False, 1) as once:
                once()

        return {
            "cupy first op": "not run (no CuPy on the host build)",
            "compile + launch": compile_and_launch,
            "cudaFreeHost": backend.free_cached_memory,
            "synchronize": backend.synchronize,
        }

    def environment(self) -> dict[str, Any]:
        props = self.backend.properties
        return {
            "date": datetime.date.today().isoformat(),
            "gpu": props.name,
            "sms": props.multiprocessor_count,
            "driver_cuda": None,
            "cupy": None,
            "numpy": np.__version__,
            "python": platform.python_version(),
            "note": "a dry run on pdc-cuda's host build: its times say nothing about a GPU",
        }


def try_beside(operation: Callable[[], None], deadline: float) -> str:
    """``N ms``, ``refused`` or ``blocked``, or ``failed: ...``."""
    from pdc_cuda import ResidentKernelBlocks

    outcome: dict[str, str] = {}

    def run() -> None:
        started = time.perf_counter()
        try:
            operation()
        except ResidentKernelBlocks:
            outcome["cell"] = "refused"
            return
        except Exception as exc:
            outcome["cell"] = f"failed: {type(exc).__name__}: {exc}"
            return
        outcome["cell"] = f"{(time.perf_counter() - started) * 1e3:.1f} ms"

    worker = threading.Thread(target=run, name="beside", daemon=True)
    worker.start()
    worker.join(deadline)
    return outcome.get("cell", "blocked")


def measure_placement(
    rig: Rig,
    placement: str,
    rounds: int,
    deadline: float,
    user: UserLoop,
    alone: float,
    library: str = "asyncio",
) -> dict[str, Any]:
    """Every figure of one placement (see the module documentation), under ``library``'s
    event loop (``"asyncio"`` or ``"trio"``)."""
    import anyio

    from pdc_core import open_persistent_kernel

    result: dict[str, Any] = {"placement": placement}
    record = np.zeros((), REQUEST)

    async def round_trips(session: Any, count: int) -> list[float]:
        samples = []
        clock = time.perf_counter
        for index in range(count):
            record["id"] = index
            started = clock()
            reply = await session.request(record)
            samples.append(clock() - started)
            if int(reply["id"]) != index:
                raise AssertionError(f"reply {int(reply['id'])} for request {index}")
        return samples

    async def main() -> None:
        started = time.perf_counter()
        async with open_persistent_kernel(echo_kernel(), rig.backend, context=placement) as session:
            result["launch_ms"] = round((time.perf_counter() - started) * 1e3, 1)
            await round_trips(session, min(200, rounds))  # warm up
            result["idle_us"] = percentiles(await round_trips(session, rounds))
            user.start()
            try:
                busy_samples = await round_trips(session, rounds)
            finally:
                launched = await anyio.to_thread.run_sync(user.stop)
            result["beside_user_us"] = percentiles(busy_samples)
            result["user_kernels_launched"] = launched
            seconds = max(rig.rate_seconds, rounds * result["beside_user_us"][0] * 1e-6)
            beside_rate = await anyio.to_thread.run_sync(user.rate, seconds)
            result["user_rate_ratio"] = round(beside_rate / alone, 3) if alone else None
            operations = rig.operations(placement)
            cells = {}
            for name in OPERATIONS:
                operation = operations[name]
                if isinstance(operation, str):  # not run: the cell says why
                    cells[name] = operation
                    continue
                cells[name] = await anyio.to_thread.run_sync(try_beside, operation, deadline)
            result["beside"] = cells
            reply = await session.request(record)  # still answering
            result["answers_after"] = int(reply["id"]) == int(record["id"])

    anyio.run(main, backend=library)
    return result


def table(results: list[dict[str, Any]]) -> list[str]:
    """The results as a Markdown table (one row per placement)."""
    head = ["placement", "launch", "idle p50/p99 us", "beside user kernels p50/p99 us"]
    head += ["user kernel rate", *OPERATIONS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in results:
        if "error" in row:
            lines.append(f"| {row['placement']} | failed: {row['error']} |")
            continue
        cells = [
            row["placement"],
            f"{row['launch_ms']} ms",
            "{:.1f} / {:.1f}".format(*row["idle_us"]),
            "{:.1f} / {:.1f}".format(*row["beside_user_us"]),
            f"{row['user_rate_ratio']:.2f}x alone" if row["user_rate_ratio"] else "-",
            *(row["beside"][name] for name in OPERATIONS),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def ratios(results: list[dict[str, Any]]) -> list[str]:
    by = {row["placement"]: row for row in results if "error" not in row}
    lines = []
    if "own" in by and "shared" in by:
        ratio = by["own"]["idle_us"][0] / by["shared"]["idle_us"][0]
        lines.append(f"own / shared idle p50: {ratio:.2f}x (target <= 1.10x)")
    if "green" in by and "own" in by:
        ratio = by["green"]["idle_us"][0] / by["own"]["idle_us"][0]
        lines.append(f"green / own idle p50: {ratio:.2f}x")
    return lines


def host_rig() -> HostRig:
    """The host build's rig, or exit 2 saying why the host build cannot run here."""
    # Two kernel threads per block: one per core of a small CI machine.
    return HostRig(host_build("cuda_contexts.py", max_threads_per_block=2))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--placements", default=",".join(PLACEMENTS))
    parser.add_argument("--quick", action="store_true", help="fewer round trips")
    parser.add_argument("--deadline", type=float, default=5.0, help="seconds per operation")
    parser.add_argument("--markdown", action="store_true", help="print a docs section")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--timeout", type=float, default=300.0, help="watchdog seconds")
    parser.add_argument(
        "--host", action="store_true", help="the dry run on the host build (no GPU, no CuPy)"
    )
    args = parser.parse_args(argv)
    placements = [p.strip() for p in args.placements.split(",") if p.strip()]
    unknown = sorted(set(placements) - set(PLACEMENTS))
    if unknown:
        parser.error(f"unknown placement(s) {', '.join(unknown)}; use {', '.join(PLACEMENTS)}")
    rig = host_rig() if args.host else Rig(refuse_without_gpu("cuda_contexts.py"))
    if args.timeout > 0:
        faulthandler.dump_traceback_later(args.timeout, exit=True, file=sys.stderr)
    try:
        rounds = rig.quick_rounds if args.quick else rig.rounds
        user = rig.user_loop()
        alone = user.rate(rig.rate_seconds)  # no kernel resident yet
        env = rig.environment()
        print(json.dumps(env))
        print(f"user work alone: {alone:.0f}/s ({type(user).__name__})")
        results = []
        failed = False
        for placement in placements:
            try:
                row = measure_placement(rig, placement, rounds, args.deadline, user, alone)
            except Exception as exc:  # report it, measure the others
                failed = True
                row = {"placement": placement, "error": f"{type(exc).__name__}: {exc}"}
            print(json.dumps(row))
            results.append(row)
        lines = [*table(results), "", *ratios(results)]
        print("\n".join(lines))
        if args.markdown:
            print(f"\n### Resident-kernel placements ({env['date']}, {env['gpu']})\n")
            print("\n".join(lines))
        if args.json:
            payload = {"environment": env, "user_kernels_alone_per_s": alone, "results": results}
            with open(args.json, "w", encoding="utf-8") as out:
                json.dump(payload, out, indent=2)
        return 1 if failed else 0
    finally:
        faulthandler.cancel_dump_traceback_later()


if __name__ == "__main__":
    sys.exit(main())
