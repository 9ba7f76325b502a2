"""``pdc check``: one backend, end to end, the way a user checks a fresh install.

Each step prints one line (``PASS``, ``FAIL`` or ``SKIP``, its time, what it saw); the
exit status is 1 when any step failed, 2 for a usage error, else 0. ``--json`` prints the
same as one JSON object. The steps, in order:

* ``backend``: the backend loads, is available, and describes its device;
* ``allocate <kind>``: one allocation of each memory kind the backend declares, written
  and read back;
* ``copy to device`` / ``copy to host``: a 1 MiB array both ways, compared;
* ``kernel``: one ``@kernel`` launch (a Python body; on ``cuda`` also one from CUDA C);
* ``persistent ...``: one resident persistent kernel: its launch, a request, a batch,
  the round trip through the event loop (``wait="sleep"``) and spinning
  (``wait="spin"``), p50/p99, and its stop. The check's kernel has bodies for the
  first-party backends; another backend supplies one in its own format through the
  method ``check_persistent_body()`` of its class (:data:`CHECK_BODY_HOOK`), else the
  steps are skipped saying so;
* ``beside a resident kernel``: with the kernel resident, the backend's own probe of
  what a user does next (on ``cuda``: a CuPy op never used before, and a new kernel
  compiled and launched), in a worker thread under a deadline; skipped on a backend
  that has no such probe (``check_beside_resident``), whose resident kernels nothing
  else waits for (the cpu backend's are threads), and when the probe raises
  :class:`~pdc_core.CapabilityError` (what it runs needs what the device lacks: the
  reason is the step's detail);
* ``released``: the kernel exited, no thread it started is left (an event loop's idle
  worker threads are not counted), the memory given back.

A step that cannot run (a capability the backend does not declare, a missing body) is
skipped with the reason; the steps after a failed launch are skipped, never hung: every
step that waits does so under a deadline.
"""

from __future__ import annotations

import argparse
import functools
import json
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any, Final, Literal

import anyio
import numpy as np
import numpy.typing as npt

from .. import cuda
from .._exceptions import CapabilityError
from .._kernel import kernel
from .._loop import thread_count
from .._persistent import PersistentKernelSession
from .._plugins import get_backend
from ..backend import Backend, Capability, MemoryKind, PersistentKernel
from ._options import check_async_backend, check_backend, usage_error

__all__ = ["CHECK_BODY_HOOK", "CHECK_KERNEL", "Step", "add_arguments", "run", "run_checks"]

_Status = Literal["pass", "fail", "skip"]

#: Bytes moved by the copy and allocation steps.
_COPY_BYTES: Final = 1 << 20
#: Seconds any waiting step may take before it fails (a hung launch must not hang pdc).
_STEP_DEADLINE: Final = 30.0
#: Seconds the backend's probe beside the resident kernel may take (a module load that
#: waits for the kernel would otherwise hang the check).
_BESIDE_DEADLINE: Final = 10.0
#: Seconds the released step waits for threads and memory to go back.
_SETTLE: Final = 5.0
#: The most round trips ``--requests`` may ask for: their timings (8 bytes each, per
#: wait mode) must fit any machine's memory; more is a usage error.
_MAX_REQUESTS: Final = 10_000_000

_REQUEST: Final = np.dtype([("id", "<u8"), ("value", "<f8")], align=True)
_REPLY: Final = _REQUEST


def _cpu_body(requests: npt.NDArray[Any]) -> npt.NDArray[Any]:
    replies = np.empty(len(requests), _REPLY)
    replies["id"] = requests["id"]
    replies["value"] = requests["value"] + 1.0
    return replies


def _metal_body(requests: Any) -> dict[str, Any]:
    return {"id": requests["id"], "value": requests["value"] + 1.0}


_CUDA_BODY: Final = """
__device__ int pdc_body(const pdc_request& request, pdc_reply& reply) {
    reply.id = request.id;
    reply.value = request.value + 1.0;
    return 0;
}
"""

#: The persistent kernel of the check: each reply is its request plus one.
CHECK_KERNEL: Final = PersistentKernel(
    "pdc_check",
    _REQUEST,
    _REPLY,
    capacity=1024,
    max_batch=256,
    bodies={"cpu": _cpu_body, "cuda": _CUDA_BODY, "metal": _metal_body},
)


#: The backend method that gives the check's kernel a body for a backend pdc has none
#: for: ``backend.check_persistent_body()`` returns the body, in the backend's format,
#: of a kernel whose requests and replies are ``{id: uint64, value: float64}`` records
#: (aligned) and whose reply to each request is the request with ``value + 1``.
CHECK_BODY_HOOK: Final = "check_persistent_body"


def _check_kernel(backend: Backend) -> PersistentKernel:
    """The check's kernel with a body for ``backend``: a first-party one of
    :data:`CHECK_KERNEL`, else the one the backend supplies (:data:`CHECK_BODY_HOOK`)."""
    if backend.name in CHECK_KERNEL.bodies:
        return CHECK_KERNEL
    supply = getattr(backend, CHECK_BODY_HOOK, None)
    if not callable(supply):
        raise _Skip(
            f"the check has no kernel body for {backend.name}: its backend class can "
            f"supply one with {CHECK_BODY_HOOK}() (docs/plugin-guide.md)"
        )
    body = supply()
    bodies = {**CHECK_KERNEL.bodies, backend.name: body}  # a copy: CHECK_KERNEL stays as is
    return PersistentKernel(
        CHECK_KERNEL.name,
        _REQUEST,
        _REPLY,
        capacity=CHECK_KERNEL.capacity,
        max_batch=CHECK_KERNEL.max_batch,
        bodies=bodies,
    )


@kernel(name="pdc_check_add_one")
def _add_one(data: Any) -> None:
    i = cuda.grid(1)
    if i < data.shape[0]:
        data[i] += 1.0


def _metal_add_one(data: Any) -> None:
    data[...] = data + 1.0


_metal_kernel = kernel(name="pdc_check_add_one_mlx")(_metal_add_one)

_add_one_cuda_c = kernel.source(
    """
extern "C" __global__ void pdc_check_add_one_c(double* data, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) data[i] += 1.0;
}
""",
    name="pdc_check_add_one_c",
)


@dataclass
class Step:
    """One line of the check: what was checked, how it went, how long it took."""

    name: str
    status: _Status
    seconds: float
    detail: str = ""


class _Skip(Exception):
    """A step that cannot run here; the message says why."""


class _Checker:
    def __init__(self, backend_name: str | None, requests: int) -> None:
        self.backend_name = backend_name
        self.requests = requests
        self.steps: list[Step] = []
        self.backend: Backend | None = None
        self.session: PersistentKernelSession[Any, Any] | None = None
        self.threads_before = thread_count()

    def _record(self, name: str, started: float, status: _Status, detail: str) -> bool:
        self.steps.append(Step(name, status, time.perf_counter() - started, detail))
        return status == "pass"

    def step(self, name: str, body: Callable[[], str]) -> bool:
        started = time.perf_counter()
        try:
            detail = body()
        except _Skip as skip:
            return self._record(name, started, "skip", str(skip))
        except Exception as error:
            return self._record(name, started, "fail", f"{type(error).__name__}: {error}")
        return self._record(name, started, "pass", detail)

    async def astep(self, name: str, body: Callable[[], Awaitable[str]]) -> bool:
        started = time.perf_counter()
        try:
            with anyio.fail_after(_STEP_DEADLINE):
                detail = await body()
        except _Skip as skip:
            return self._record(name, started, "skip", str(skip))
        except TimeoutError:
            return self._record(name, started, "fail", f"no result within {_STEP_DEADLINE:g} s")
        except Exception as error:
            return self._record(name, started, "fail", f"{type(error).__name__}: {error}")
        return self._record(name, started, "pass", detail)

    def skip(self, name: str, why: str) -> None:
        self.steps.append(Step(name, "skip", 0.0, why))

    # -- the steps ---------------------------------------------------------------------

    def load(self) -> str:
        backend = get_backend(self.backend_name)
        self.backend = backend
        availability = type(backend).availability()
        if not availability.available:
            raise RuntimeError(f"{backend.name} is unavailable: {availability.reason}")
        info = backend.device_info
        memory = f", {info.total_memory / 2**30:.1f} GiB" if info.total_memory else ""
        count = len(type(backend).devices())
        caps = ", ".join(sorted(backend.capabilities))
        return (
            f"{backend.qualified_name}: {info.name} ({info.kind}{memory}), "
            f"{count} device{'s' * (count != 1)}; {caps}"
        )

    def allocate(self, kind: MemoryKind) -> str:
        backend = self._backend()
        count = _COPY_BYTES // 8
        expected = np.arange(count, dtype=np.float64)
        array = backend.allocate((count,), np.dtype(np.float64), kind)
        if kind in (MemoryKind.HOST, MemoryKind.PINNED, MemoryKind.MAPPED):
            array[...] = expected
            seen = np.asarray(array)
        else:
            backend.to_device(expected, out=array)
            seen = backend.to_host(array)
        if not np.array_equal(seen, expected):
            raise AssertionError(f"{kind.value} memory did not read back what was written")
        kind_name = f"{type(array).__module__.split('.')[0]}.{type(array).__name__}"
        del array, seen
        return f"{_COPY_BYTES >> 20} MiB ({kind_name}) written and read back"

    def copies(self) -> None:
        backend = self._backend()
        source = np.random.default_rng(7).random(_COPY_BYTES // 8)
        state: dict[str, Any] = {}

        def to_device() -> str:
            started = time.perf_counter()
            state["device"] = backend.to_device(source)
            backend.synchronize()
            return _rate(_COPY_BYTES, time.perf_counter() - started)

        def to_host() -> str:
            if "device" not in state:
                raise _Skip("nothing was copied to the device")
            started = time.perf_counter()
            back = backend.to_host(state.pop("device"))
            elapsed = time.perf_counter() - started
            if not np.array_equal(back, source):
                raise AssertionError("the array copied back differs from the one sent")
            return _rate(_COPY_BYTES, elapsed)

        self.step("copy to device", to_device)
        self.step("copy to host", to_host)

    def kernels(self) -> None:
        backend = self._backend()
        if not backend.has(Capability.PYTHON_KERNELS):
            self.skip("kernel (Python body)", f"{backend.name} declares no python_kernels")
        else:
            python_kernel = _metal_kernel if backend.name == "metal" else _add_one
            self.step("kernel (Python body)", lambda: _launch(python_kernel, backend))
        if backend.name == "cuda" and backend.has(Capability.KERNELS):
            self.step("kernel (CUDA C)", lambda: _launch(_add_one_cuda_c, backend, c_int=True))

    async def persistent(self) -> None:
        backend = self._backend()
        if not backend.has(Capability.PERSISTENT_KERNELS):
            self.skip("persistent launch", f"{backend.name} declares no persistent_kernels")
            return
        if not await self.astep("persistent launch", self._launch_persistent):
            return
        try:
            await self.astep("persistent request", self._request)
            await self.astep("persistent batch", self._batch)
            await self.astep("beside a resident kernel", self._beside)
            await self.astep("round trip (await)", lambda: self._round_trips("sleep"))
            await self.astep("round trip (spin)", lambda: self._round_trips("spin"))
        finally:
            await self.astep("persistent stop", self._stop)

    async def _launch_persistent(self) -> str:
        spec = _check_kernel(self._backend())
        started = time.perf_counter()
        self.session = await PersistentKernelSession.start(spec, self._backend())
        return f"resident in {_ms(time.perf_counter() - started)}"

    async def _request(self) -> str:
        reply = await self._session().request((41, 1.5))
        if int(reply["id"]) != 41 or float(reply["value"]) != 2.5:
            raise AssertionError(f"reply {reply} is not (41, 2.5)")
        return "one record there and back"

    async def _batch(self) -> str:
        count = 4096
        batch = np.empty(count, _REQUEST)
        batch["id"] = np.arange(count)
        batch["value"] = np.arange(count) * 0.5
        started = time.perf_counter()
        replies = await self._session().request_batch(batch)
        elapsed = time.perf_counter() - started
        if not (
            np.array_equal(replies["id"], batch["id"])
            and np.array_equal(replies["value"], batch["value"] + 1.0)
        ):
            raise AssertionError("the batch's replies are not its requests plus one")
        return f"{count} records, {count / elapsed / 1e6:.2f} M records/s"

    async def _beside(self) -> str:
        backend = self._backend()
        probe = getattr(backend, "check_beside_resident", None)
        if not callable(probe):
            raise _Skip(
                f"not applicable: {backend.name} has no probe of work beside a resident kernel "
                "(its resident kernels hold nothing other work waits for)"
            )
        self._session()
        try:
            with anyio.fail_after(_BESIDE_DEADLINE):
                detail = await anyio.to_thread.run_sync(probe, abandon_on_cancel=True)
        except TimeoutError:
            raise AssertionError(
                f"blocked for {_BESIDE_DEADLINE:g} s beside the resident kernel (a module "
                "load or a free waiting for it)"
            ) from None
        except CapabilityError as missing:  # the probe needs what this device lacks
            raise _Skip(f"not applicable: {missing}") from None
        return str(detail)

    async def _round_trips(self, wait: Literal["sleep", "spin"]) -> str:
        session = self._session()
        session.wait = wait
        record = np.zeros((), _REQUEST)
        samples = np.empty(self.requests)
        for _ in range(min(100, self.requests)):  # warm-up, not counted
            await session.request(record)
        for index in range(self.requests):
            started = time.perf_counter_ns()
            await session.request(record)
            samples[index] = time.perf_counter_ns() - started
        session.wait = "sleep"
        p50, p99 = np.percentile(samples, [50, 99]) / 1e3
        return f"p50 {p50:.1f} us, p99 {p99:.1f} us over {self.requests} requests"

    async def _stop(self) -> str:
        session = self._session()
        await session.aclose()
        if not session.resident.exited:
            raise AssertionError("the kernel has not exited after its session closed")
        return "stopped; the kernel exited"

    async def released(self) -> str:
        deadline = time.monotonic() + _SETTLE
        backend = self.backend
        if backend is not None:
            backend.synchronize()
            backend.free_cached_memory()
        while thread_count() > self.threads_before:
            if time.monotonic() > deadline:
                left = sorted(t.name for t in threading.enumerate())
                raise AssertionError(f"threads left behind: {left}")
            await anyio.sleep(0.01)
        resident = getattr(backend, "resident_kernels", None)
        if callable(resident) and resident():
            raise AssertionError(f"kernels still resident: {resident()}")
        if backend is None:
            return "nothing was started"
        stats = backend.memory_statistics()
        return f"no thread or kernel left; pool: {stats.bytes_in_use} bytes in use"

    def _backend(self) -> Backend:
        if self.backend is None:
            raise _Skip("no backend")
        return self.backend

    def _session(self) -> PersistentKernelSession[Any, Any]:
        if self.session is None:
            raise _Skip("no resident kernel")
        return self.session


def _launch(target: Any, backend: Backend, *, c_int: bool = False) -> str:
    data = np.arange(1000, dtype=np.float64)
    device = backend.to_device(data)
    args = (device, np.int32(len(data))) if c_int else (device,)
    target(*args, backend=backend, size=len(data))
    backend.synchronize()
    back = backend.to_host(device)
    if not np.array_equal(back, data + 1.0):
        raise AssertionError("the kernel did not add one to every element")
    return f"{len(data)} elements incremented"


def _rate(size: int, seconds: float) -> str:
    return f"{size >> 20} MiB in {_ms(seconds)} ({size / max(seconds, 1e-9) / 1e9:.2f} GB/s)"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


async def run_checks(backend: str | None = None, *, requests: int = 2000) -> list[Step]:
    """Run every step of ``pdc check`` against ``backend`` (default: the default backend)
    and return them in order; never raises for a failing step. Cancelling it stops the
    resident kernel of the check before the cancellation propagates."""
    return (await _run_checks(backend, requests)).steps


async def _run_checks(backend: str | None, requests: int) -> _Checker:
    """:func:`run_checks`, returning the checker (its steps, and the backend it loaded)."""
    checker = _Checker(backend, requests)
    if not checker.step("backend", checker.load):
        return checker
    backend_ = checker._backend()
    for kind in MemoryKind:
        needs = {
            MemoryKind.PINNED: Capability.PINNED_MEMORY,
            MemoryKind.MAPPED: Capability.MAPPED_MEMORY,
            MemoryKind.MANAGED: Capability.MANAGED_MEMORY,
        }.get(kind)
        if needs is not None and not backend_.has(needs):
            checker.skip(f"allocate {kind.value}", f"{backend_.name} declares no {needs.value}")
        else:
            checker.step(f"allocate {kind.value}", functools.partial(checker.allocate, kind))
    checker.copies()
    checker.kernels()
    try:
        await checker.persistent()
    finally:
        if checker.session is not None:
            with anyio.CancelScope(shield=True):
                await checker.session.aclose()
    await checker.astep("released", checker.released)
    return checker


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--backend",
        metavar="NAME",
        help="the backend to check, such as cpu or cuda:1 (default: PDC_BACKEND, else the best)",
    )
    parser.add_argument(
        "--requests",
        type=int,
        default=2000,
        metavar="N",
        help=f"round trips timed per wait mode (default 2000, at most {_MAX_REQUESTS:,})",
    )
    parser.add_argument(
        "--async-backend",
        choices=("asyncio", "trio"),
        default="asyncio",
        help="the event loop the check runs under (default asyncio)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON for machines")


def run(args: argparse.Namespace) -> int:
    if args.requests < 1:
        return usage_error("check", "--requests must be at least 1")
    if args.requests > _MAX_REQUESTS:
        return usage_error("check", f"--requests must be at most {_MAX_REQUESTS:,}")
    status = check_backend(args.backend, "check") or check_async_backend(
        args.async_backend, "check"
    )
    if status:
        return status
    checker = anyio.run(_run_checks, args.backend, args.requests, backend=args.async_backend)
    steps = checker.steps
    ok = all(step.status != "fail" for step in steps)
    # The backend checked, as its device is named ("cpu:0"); what was asked for when it
    # did not load.
    checked = checker.backend.qualified_name if checker.backend is not None else args.backend
    if args.json:
        print(
            json.dumps(
                {
                    "backend": checked,
                    "async_backend": args.async_backend,
                    "ok": ok,
                    "steps": [asdict(step) for step in steps],
                },
                indent=2,
            )
        )
    else:
        width = max(len(step.name) for step in steps)
        for step in steps:
            print(
                f"{step.status.upper():4}  {step.name:<{width}}  {step.seconds * 1e3:9.2f} ms"
                f"  {step.detail}"
            )
        failed = sum(step.status == "fail" for step in steps)
        print("all checks passed" if ok else f"{failed} check{'s' * (failed != 1)} failed")
    return 0 if ok else 1
