"""pdc-ray: a remote actor's ``ask`` against a bare Ray actor call, in one run.

Run from the repository root with pdc-ray installed (``pip install -e plugins/pdc_ray``)::

    python benchmarks/ray_actor.py            # 7 rounds x 300 round trips, 20k batched,
                                              # kernel batches of 100k records
    python benchmarks/ray_actor.py --quick    # 3 rounds x 100, 5k batched, 20k records
    python benchmarks/ray_actor.py --profile  # where one ask's time goes, stage by stage

It starts its own local Ray (``address="local"``, 2 CPUs, no dashboard, its own temp
dir) and one pdc remote actor (``pdc_ray.on(num_cpus=0)``) whose handler returns its
message. Contenders, under asyncio and under trio, all against that same Ray actor
process (the host of the pdc actor):

* ``bare Ray call`` -- ``RayHost.echo``, a method of the same host actor that returns
  its argument: ``await handle.echo.remote(i)`` under asyncio (Ray's own awaitable),
  and through pdc-ray's ``ObjectRef`` bridge (``await_ref``) under both loops; and
  ``bytes``: the message pickled by the caller and unpickled from the reply, as pdc-ray's
  Ray engine ships its calls (Ray ships ``bytes`` with less work than an ``int``), the
  floor of any call through Ray;
* ``pdc ask`` -- ``await ref.ask(i)``: with nothing queued or in flight the caller
  ships it itself (else the local mailbox and a shipper), one Ray call, the host hands
  it to the remote nursery's mailbox actor, the reply back;
* batched: ``await ref.ask_many(msgs)`` (batches of ``max_batch`` = 1024, a window of
  4 calls in flight) against per-message Ray calls (every ``echo.remote`` submitted
  at once, then all awaited: Ray pipelines them);
* a remote persistent kernel (``start_actor(kernel, placement=pdc_ray.on(num_cpus=0,
  backend="cpu"))``, resident in its own worker, a ring of 4096 slots): ``await
  ref.ask_batch(records)`` (one structured array per Ray call, one ``request_batch``
  there) against per-record Ray calls to that worker (``echo.remote(record)`` for each
  record, all submitted at once, then all awaited);
* failure paths: a remote crash to the nursery raising; a SIGKILLed worker to the
  nursery raising (found by the watch call failing); cancelling the nursery to its
  exit, which returns only once Ray reports the worker dead.

Ratios are of p50s taken within each round (one call of each contender in turn, in an
order rotating per round, so load from other work on the machine falls on all alike),
and their median over the rounds.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import itertools
import logging
import os
import pickle
import platform
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import numpy as np
import numpy.typing as npt
import pdc_ray
import ray
from pdc_ray._ray_engine import await_ref

from pdc_core import Actor, ActorCrashed, PersistentKernel, open_nursery

REQUEST = np.dtype([("id", "<u8"), ("x", "<f8")], align=True)
REPLY = np.dtype([("id", "<u8"), ("y", "<f8")], align=True)


def double(requests: npt.NDArray[Any]) -> npt.NDArray[Any]:
    replies = np.empty(len(requests), REPLY)
    replies["id"] = requests["id"]
    replies["y"] = requests["x"] * 2
    return replies


KERNEL = PersistentKernel("double", REQUEST, REPLY, capacity=4096, bodies={"cpu": double})


class Echo(Actor[Any, Any]):
    async def handle(self, message: Any) -> Any:
        if isinstance(message, BaseException):
            raise message
        if message == "pid":
            return os.getpid()
        return message


def p50(samples: list[float]) -> float:
    return statistics.median(samples)


async def timed(n: int, call: Callable[[int], Awaitable[Any]]) -> list[float]:
    samples = []
    for i in range(n):
        start = time.perf_counter()
        await call(i)
        samples.append(time.perf_counter() - start)
    return samples


async def latency_and_throughput(rounds: int, n: int, batch: int, backend: str) -> dict[str, Any]:
    # A long heartbeat: the per-message flood below goes through the same handle, and
    # Ray sends one caller's calls to an actor in order, so it delays the heartbeat's
    # pings by seconds (pdc's own traffic is bounded by its window of 4 calls).
    placement = pdc_ray.on(num_cpus=0, heartbeat=120)
    async with open_nursery() as nursery:
        ref = await nursery.start_actor(Echo, placement=placement)
        handle = ref._runner._actor  # type: ignore[attr-defined]  # the host's Ray handle

        async def bare_bridge(i: int) -> Any:
            return await await_ref(handle.echo.remote(i))

        async def bare_native(i: int) -> Any:
            return await handle.echo.remote(i)

        async def bare_bytes(i: int) -> Any:
            return pickle.loads(await await_ref(handle.echo.remote(pickle.dumps(i))))

        contenders: dict[str, Callable[[int], Awaitable[Any]]] = {
            "bare Ray call (bridge)": bare_bridge,
            "pdc ask": ref.ask,
            "bare Ray call, bytes (bridge)": bare_bytes,
        }
        if backend == "asyncio":
            contenders["bare Ray call (await ref)"] = bare_native
        for call in contenders.values():  # warm up
            await timed(50, call)
        per_round: dict[str, list[float]] = {name: [] for name in contenders}
        pooled: dict[str, list[float]] = {name: [] for name in contenders}
        names = list(contenders)
        for r in range(rounds):
            # One call of each contender in turn (the order rotating per round), so
            # that the load other work puts on the machine falls on all of them alike.
            order = names[r % len(names) :] + names[: r % len(names)]
            samples: dict[str, list[float]] = {name: [] for name in names}
            for i in range(n):
                for name in order:
                    start = time.perf_counter()
                    await contenders[name](i)
                    samples[name].append(time.perf_counter() - start)
            for name in names:
                per_round[name].append(p50(samples[name]))
                pooled[name].extend(samples[name])

        msgs = list(range(batch))
        await ref.ask_many(msgs[:1000])
        batched, per_message = [], []
        for _ in range(max(1, rounds // 2)):
            start = time.perf_counter()
            replies = await ref.ask_many(msgs)
            batched.append(batch / (time.perf_counter() - start))
            assert replies == msgs
            start = time.perf_counter()
            refs = [handle.echo.remote(i) for i in msgs]
            for object_ref in refs:
                await await_ref(object_ref)
            per_message.append(batch / (time.perf_counter() - start))
    return {"per_round": per_round, "pooled": pooled, "batched": batched, "per_msg": per_message}


async def kernel_batches(rounds: int, batch: int, per_record: int) -> dict[str, list[float]]:
    """Records per second: a remote kernel's ``ask_batch`` of ``batch`` records against
    ``per_record`` per-record Ray calls to the same worker, interleaved per round."""
    placement = pdc_ray.on(num_cpus=0, backend="cpu", heartbeat=120)  # see above: the flood
    records = np.zeros(batch, REQUEST)
    records["id"] = np.arange(batch)
    records["x"] = np.arange(batch) * 0.5
    out: dict[str, list[float]] = {"ask_batch": [], "per_record": []}
    async with open_nursery() as nursery:
        ref = await nursery.start_actor(KERNEL, placement=placement)
        assert isinstance(ref, pdc_ray.RemoteKernelRef)
        handle: Any = ref._runner._actor  # the host's Ray handle
        await ref.ask_batch(records[:1000])
        for _ in range(rounds):
            start = time.perf_counter()
            replies = await ref.ask_batch(records)
            out["ask_batch"].append(batch / (time.perf_counter() - start))
            assert (replies["y"] == records["x"] * 2).all()
            start = time.perf_counter()
            refs = [handle.echo.remote(record) for record in records[:per_record]]
            for object_ref in refs:
                await await_ref(object_ref)
            out["per_record"].append(per_record / (time.perf_counter() - start))
    return out


async def failure_paths(repeats: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"crash": [], "kill": [], "cancel": []}
    placement = pdc_ray.on(num_cpus=0)
    for _ in range(repeats):
        try:
            async with open_nursery() as nursery:
                ref = await nursery.start_actor(Echo, placement=placement)
                await ref.ask(0)
                start = time.perf_counter()
                await ref.tell(RuntimeError("boom"))
                await anyio.sleep_forever()
        except ActorCrashed:
            out["crash"].append(time.perf_counter() - start)
        try:
            async with open_nursery() as nursery:
                ref = await nursery.start_actor(Echo, placement=placement)
                pid = await ref.ask("pid")
                start = time.perf_counter()
                os.kill(pid, signal.SIGKILL)
                await anyio.sleep_forever()
        except ActorCrashed:
            out["kill"].append(time.perf_counter() - start)
        with anyio.CancelScope() as scope:
            async with open_nursery() as nursery:
                ref = await nursery.start_actor(Echo, placement=placement)
                await ref.ask(0)
                start = time.perf_counter()
                scope.cancel()
        out["cancel"].append(time.perf_counter() - start)
    return out


def report(backend: str, result: dict[str, Any]) -> None:
    per_round = result["pooled"]
    print(f"\n{backend}: round trip (pooled samples, us)")
    for name, samples in per_round.items():
        qs = statistics.quantiles(samples, n=100)
        print(
            f"  {name:28s} p50 {p50(samples) * 1e6:8.0f}  p90 {qs[89] * 1e6:8.0f}"
            f"  p99 {qs[98] * 1e6:8.0f}"
        )
    rounds = result["per_round"]
    for bare in [name for name in rounds if name.startswith("bare")]:
        ratios = [a / b for a, b in zip(rounds["pdc ask"], rounds[bare], strict=True)]
        print(
            f"  pdc ask / {bare}: median ratio {statistics.median(ratios):.3f} "
            f"(rounds {min(ratios):.3f}-{max(ratios):.3f})"
        )
    batched, per_msg = result["batched"], result["per_msg"]
    ratios = [a / b for a, b in zip(batched, per_msg, strict=True)]
    print(
        f"  ask_many {statistics.median(batched):,.0f} msg/s vs per-message Ray calls "
        f"{statistics.median(per_msg):,.0f} msg/s: {statistics.median(ratios):.1f}x"
    )


def report_kernel(backend: str, result: dict[str, list[float]]) -> None:
    batched, per_record = result["ask_batch"], result["per_record"]
    ratios = [a / b for a, b in zip(batched, per_record, strict=True)]
    print(
        f"  remote kernel ask_batch {statistics.median(batched):,.0f} records/s vs per-record "
        f"Ray calls {statistics.median(per_record):,.0f} records/s: "
        f"{statistics.median(ratios):.0f}x (rounds {min(ratios):.0f}-{max(ratios):.0f}x)"
    )


class Profiled(Actor[Any, Any]):
    """Echo that, in its worker, timestamps the stages of each ``deliver`` the host
    serves (``--profile``); ``"marks"`` returns and clears them."""

    async def on_start(self) -> None:
        from pdc_ray import _host  # the host's module in the worker process

        self.marks: list[tuple[str, int]] = []
        marks = self.marks
        deliver, hand_over = _host.Host.deliver, _host.Host._hand_over

        async def timed_deliver(host: Any, *args: Any) -> Any:
            marks.append(("r.deliver", time.perf_counter_ns()))
            outcome = await deliver(host, *args)
            marks.append(("r.return", time.perf_counter_ns()))
            return outcome

        async def timed_hand_over(host: Any, *args: Any) -> None:
            marks.append(("r.hand_over", time.perf_counter_ns()))
            await hand_over(host, *args)
            marks.append(("r.handed", time.perf_counter_ns()))

        _host.Host.deliver = timed_deliver  # type: ignore[method-assign, assignment]
        _host.Host._hand_over = timed_hand_over  # type: ignore[method-assign, assignment]

    async def handle(self, message: Any) -> Any:
        if message == "marks":
            marks, self.marks[:] = list(self.marks), []
            return marks
        self.marks.append(("r.handler", time.perf_counter_ns()))
        return message


async def profile(n: int) -> None:
    """Where one ``ask`` spends its time: medians of the gaps between timestamps taken
    along its path, here and in the worker (one clock: CLOCK_MONOTONIC on one machine),
    next to a bare call. The timestamps cost a few us each."""
    from pdc_ray import _ray_engine

    marks: list[tuple[str, int]] = []
    submit, result = _ray_engine.RayEngine.submit, _ray_engine._RayCall.result

    def timed_submit(engine: Any, *args: Any, **kwargs: Any) -> Any:
        pending = submit(engine, *args, **kwargs)
        marks.append(("c.submitted", time.perf_counter_ns()))
        return pending

    async def timed_result(call: Any) -> Any:
        value = await result(call)
        marks.append(("c.answered", time.perf_counter_ns()))
        return value

    _ray_engine.RayEngine.submit = timed_submit  # type: ignore[method-assign, assignment]
    _ray_engine._RayCall.result = timed_result  # type: ignore[method-assign, assignment]
    try:
        async with open_nursery() as nursery:
            placement = pdc_ray.on(num_cpus=0, heartbeat=120)
            ref = await nursery.start_actor(Profiled, placement=placement)
            handle: Any = ref._runner._actor  # type: ignore[attr-defined]
            gaps: dict[tuple[str, str], list[int]] = {}
            totals, bare = [], []
            for i in range(50 + n):
                marks.clear()
                start = time.perf_counter_ns()
                await ref.ask(i)
                end = time.perf_counter_ns()
                remote = await ref.ask("marks")
                b0 = time.perf_counter_ns()
                await await_ref(handle.echo.remote(i))
                b1 = time.perf_counter_ns()
                if i < 50:  # warm-up
                    continue
                inside = [mark for mark in remote if start <= mark[1] <= end]
                path = sorted(
                    [("c.ask", start), *marks[:2], *inside, ("c.return", end)],
                    key=lambda mark: mark[1],
                )
                for (a, ta), (b, tb) in itertools.pairwise(path):
                    gaps.setdefault((a, b), []).append(tb - ta)
                totals.append(end - start)
                bare.append(b1 - b0)
    finally:
        _ray_engine.RayEngine.submit = submit  # type: ignore[method-assign]
        _ray_engine._RayCall.result = result  # type: ignore[method-assign]
    for (a, b), samples in gaps.items():
        if len(samples) >= n // 2:
            print(f"  {a:>12} -> {b:<12} {statistics.median(samples) / 1e3:7.1f} us")
    print(
        f"  ask {statistics.median(totals) / 1e3:.0f} us, bare Ray call (bridge) "
        f"{statistics.median(bare) / 1e3:.0f} us (medians, interleaved)"
    )


def main() -> None:
    logging.getLogger("pdc").setLevel(logging.CRITICAL)  # the crashes below are on purpose
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--profile", action="store_true", help="only time the stages of one ask, end to end"
    )
    args = parser.parse_args()
    rounds, n, batch, repeats = (3, 100, 5_000, 1) if args.quick else (7, 300, 20_000, 3)
    records, per_record = (20_000, 1_000) if args.quick else (100_000, 3_000)
    versions = ", ".join(
        f"{pkg} {importlib.metadata.version(pkg)}"
        for pkg in ("ray", "pdc-core", "pdc-ray", "anyio", "trio")
    )
    print(
        f"{' '.join(sys.argv)}\nPython {platform.python_version()}, {versions}, "
        f"{os.cpu_count()} CPUs"
    )
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        _temp_dir=tempfile.mkdtemp(prefix="pdc-ray-bench-", dir="/tmp"),
    )
    try:
        if args.profile:
            for backend in ("asyncio", "trio"):
                print(f"\n{backend}: one ask, stage by stage (median gaps over {n} asks)")
                anyio.run(profile, n, backend=backend)
            return
        failures: dict[str, dict[str, list[float]]] = {}
        for backend in ("asyncio", "trio"):
            result = anyio.run(latency_and_throughput, rounds, n, batch, backend, backend=backend)
            report(backend, result)
            kernel = anyio.run(
                kernel_batches, max(1, rounds // 2), records, per_record, backend=backend
            )
            report_kernel(backend, kernel)
            failures[backend] = anyio.run(failure_paths, repeats, backend=backend)
        print("\nfailure paths (ms, each a fresh remote actor):")
        for backend, paths in failures.items():
            line = "  ".join(
                f"{what} {min(v) * 1e3:.0f}-{max(v) * 1e3:.0f}" for what, v in paths.items()
            )
            print(f"  {backend:8s} {line}")
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
