"""What ``session.request_batch`` costs the host per record, phase by phase (issue 45, item 3).

The batched throughput of the CUDA ring (``benchmarks/cuda_ring.py``: whole rings of
8-byte records) is bounded by the host's own work, by the device, or by both in turn
(the host writes a whole batch, then the device answers it). This measures the host's
part without a GPU: the same session, ring layout (sequenced input slots, as on CUDA)
and records, with a device stand-in that answers inside the doorbell with one block
copy per run of slots (its time is measured and left out of the host's). Per record:

* **pack**: the records copied into the strided input slots;
* **stamp**: their sequence words stored;
* **publish**: the rest of ``RingHost.write`` (the ``IN_HEAD`` store, the free-slot
  check, slicing);
* **doorbell**: ``resident.wake()`` less the stand-in's own work (on CUDA, a no-op call);
* **collect**: the replies copied out of the ring into the caller's array, and the
  slots released (``RingHost.published`` .. ``RingHost.release``);
* **session**: everything else in ``request_batch`` (validation, routing, the leader's
  wait, the event loop), the whole call less the phases above and the stand-in.

Also **write alone**: ``RingHost.write`` of a batch into an empty ring, without a
session or an event loop. For batches of 64, 1024 and 65,536 (a whole ring) records,
under asyncio and trio; each figure the least over ``--rounds`` (the round least slowed
by other work). With ``--old TREE``, the same measurements from another
source tree's pdc-core (``TREE/src``) and from this one alternately, ``--pairs`` times,
in fresh processes, and the median per-pair ratio new/old of each figure (below 1:
the new tree costs the host less)::

    .venv/bin/python benchmarks/ring_batch_host.py
    git worktree add /tmp/old <commit before>
    .venv/bin/python benchmarks/ring_batch_host.py --old /tmp/old --pairs 6

Times on a shared CPU are only good for ratios measured in the same run.
:class:`HostPhases` is the timer ``benchmarks/cuda_ring.py`` puts on a real CUDA session.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

import anyio
import numpy as np

#: The records of cuda_ring.py's throughput measurement: 8 bytes.
REQ = np.dtype([("id", "<u8")])
CAPACITY = 1 << 16
SIZES = (64, 1024, CAPACITY)
LIBRARIES = ("asyncio", "trio")
PHASES = ("pack", "stamp", "publish", "doorbell", "collect", "session")


class HostPhases:
    """Seconds a session's host end spends in each phase of ``request_batch``.

    Wraps, on the instance only, the methods of ``ring`` (the session's
    ``resident.ring``, a :class:`~pdc_core.backend.RingHost`) that do the host's work
    per record: ``write`` (pack, stamp and publish; pack and stamp apart where the ring
    has the methods ``_copy_in`` and ``_stamp``: a ring with sequence words; on plain
    slots the copy is part of ``publish``), and the collection of replies, from
    ``published`` to the ``release`` after it. :meth:`remove` puts the methods back.
    A few clock reads per batch: time it on a pass of its own, not the timed one.
    """

    def __init__(self, ring: Any) -> None:
        self.ring = ring
        self.seconds = dict.fromkeys(("write", "pack", "stamp", "collect"), 0.0)
        #: Replies collected, and the collections (pumps that moved replies) they took.
        self.collected = 0
        self.collections = 0
        self._collect_started: float | None = None
        self._wrapped: list[str] = []
        clock = time.perf_counter
        seconds = self.seconds

        def timed(name: str, phase: str) -> None:
            original = getattr(ring, name)

            def wrapper(*args: Any, **kwargs: Any) -> Any:
                start = clock()
                try:
                    return original(*args, **kwargs)
                finally:
                    seconds[phase] += clock() - start

            setattr(ring, name, wrapper)
            self._wrapped.append(name)

        timed("write", "write")
        for name, phase in (("_copy_in", "pack"), ("_stamp", "stamp")):
            if hasattr(ring, name):
                timed(name, phase)
        published, release = ring.published, ring.release

        def published_timed(*args: Any, **kwargs: Any) -> Any:
            self._collect_started = clock()
            return published(*args, **kwargs)

        def release_timed(count: int) -> None:
            try:
                release(count)
            finally:
                if self._collect_started is not None:
                    seconds["collect"] += clock() - self._collect_started
                    self._collect_started = None
                    if count:
                        self.collected += count
                        self.collections += 1

        ring.published, ring.release = published_timed, release_timed
        self._wrapped += ["published", "release"]

    def remove(self) -> None:
        """Put the ring's own methods back."""
        for name in self._wrapped:
            delattr(self.ring, name)
        self._wrapped.clear()

    def per_record_ns(self, records: int) -> dict[str, float]:
        """Each phase's time per record, in ns (``publish``: the write less pack and stamp)."""
        scale = 1e9 / records
        seconds = self.seconds
        return {
            "pack": seconds["pack"] * scale,
            "stamp": seconds["stamp"] * scale,
            "publish": (seconds["write"] - seconds["pack"] - seconds["stamp"]) * scale,
            "write": seconds["write"] * scale,
            "collect": seconds["collect"] * scale,
        }


# -- the device stand-in ----------------------------------------------------------------------


def standin_backend() -> Any:
    """A backend whose persistent kernel answers inside ``wake``: every request published
    is echoed with one block copy per run of slots, and its time is kept apart."""
    from pdc_core import Backend, Capability, DeviceInfo
    from pdc_core.backend import (
        Availability,
        MemoryKind,
        MemoryStatistics,
        Offset,
        ResidentKernel,
        StopMode,
    )

    run = int(StopMode.RUN)
    stop, done = int(Offset.STOP) >> 2, int(Offset.DONE) >> 2
    in_head, in_tail = int(Offset.IN_HEAD) >> 3, int(Offset.IN_TAIL) >> 3
    out_head, out_tail = int(Offset.OUT_HEAD) >> 3, int(Offset.OUT_TAIL) >> 3

    class BlockEcho(ResidentKernel):
        def __init__(self, backend: Any, kernel: Any, memory: Any) -> None:
            super().__init__(backend, kernel, memory)
            self.finished = False
            self.device_s = 0.0  # the stand-in's own work, left out of the host's
            self.wakes = 0
            layout = memory.layout
            self._cap, self._out_cap = layout.in_capacity, layout.out_capacity
            # The slots' record bytes as opaque records (strided when sequenced).
            payloads = memory.in_payloads
            self._inputs = memory.in_slots if payloads is None else payloads
            self._outputs = memory.out_slots.view(self._inputs.dtype)
            memory.words32[Offset.STARTED >> 2] = 1

        def wake(self) -> None:
            start = time.perf_counter()
            self.wakes += 1
            memory = self.memory
            w64 = memory.words64
            if memory.words32[stop] != run:
                memory.words32[done] = 1
                self.finished = True
            else:
                tail = int(w64[in_tail])
                end = min(int(w64[in_head]), int(w64[out_tail]) + self._out_cap)
                while tail < end:
                    slot = tail % self._cap
                    count = min(end - tail, self._cap - slot)
                    self._outputs[slot : slot + count] = self._inputs[slot : slot + count]
                    tail += count
                w64[in_tail] = tail
                w64[out_head] = tail
            self.device_s += time.perf_counter() - start

        @property
        def exited(self) -> bool:
            return self.finished

    class StandinBackend(Backend):
        name: ClassVar[str] = "ring-batch-standin"
        distribution: ClassVar[str] = "none"
        capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.PERSISTENT_KERNELS})
        ring_sequenced_input: ClassVar[bool] = True  # as the cuda backend

        @classmethod
        def availability(cls) -> Availability:
            return Availability.yes()

        @classmethod
        def devices(cls) -> list[DeviceInfo]:
            return [DeviceInfo(backend=cls.name, index=0, name="host", kind="cpu")]

        def allocate(self, shape: Any, dtype: Any, kind: Any = MemoryKind.DEVICE) -> Any:
            return np.zeros(shape, dtype)

        def to_device(self, host: Any, out: Any = None, stream: Any = None) -> Any:
            return np.array(host)

        def to_host(self, device: Any, out: Any = None, stream: Any = None) -> Any:
            return np.array(device)

        def memory_statistics(self) -> MemoryStatistics:
            return MemoryStatistics()

        def create_stream(self) -> Any:
            raise NotImplementedError

        def create_event(self) -> Any:
            raise NotImplementedError

        def synchronize(self) -> None:
            pass

        def launch_persistent_kernel(self, kernel: Any, rings: Any, **options: Any) -> Any:
            return BlockEcho(self, kernel, rings)

    return StandinBackend()


# -- one measurement ---------------------------------------------------------------------------


def measure(size: int, library: str, records: int) -> dict[str, float]:
    """ns per record of each phase over about ``records`` records in batches of ``size``."""
    from pdc_core import PersistentKernel, open_persistent_kernel

    backend = standin_backend()
    kernel = PersistentKernel("echo", REQ, REQ, capacity=CAPACITY)
    kernel.add_body(backend.name, lambda requests: requests.copy())
    batch = np.zeros(size, REQ)
    batch["id"] = np.arange(size)
    batches = max(10, records // size)
    figures: dict[str, float] = {}

    async def main() -> None:
        async with open_persistent_kernel(kernel, backend) as session:
            resident = session.resident
            assert session.memory.layout.sequenced_input
            for _ in range(5):  # warm up; the replies are the records
                replies = await session.request_batch(batch)
            if not np.array_equal(replies["id"], batch["id"]):
                raise AssertionError("the stand-in echoed other records")
            # The whole call, untouched ...
            start = time.perf_counter()
            for _ in range(batches):
                await session.request_batch(batch)
            total = time.perf_counter() - start
            # ... and its phases, in a pass of their own (the timers cost a little).
            resident.device_s = 0.0
            resident.wakes = 0
            phases = HostPhases(resident.ring)
            try:
                start = time.perf_counter()
                for _ in range(batches):
                    await session.request_batch(batch)
                timed = time.perf_counter() - start
            finally:
                phases.remove()
            device, wakes = resident.device_s, resident.wakes
        count = batches * size
        ns = phases.per_record_ns(count)
        doorbell = wakes * _wake_call_ns() / count  # the call the stand-in fills with work
        figures.update(ns)
        figures["doorbell"] = doorbell
        figures["device stand-in"] = max(0.0, device * 1e9 / count - doorbell)
        figures["total"] = total * 1e9 / count
        figures["session"] = (
            timed * 1e9 / count
            - ns["write"]
            - ns["collect"]
            - figures["device stand-in"]
            - doorbell
        )
        figures["collections per batch"] = phases.collections / batches

    anyio.run(main, backend=library)
    figures["write alone"] = write_alone_ns(size, records)
    return figures


def write_alone_ns(size: int, records: int) -> float:
    """ns per record of ``RingHost.write`` of ``size`` records into an empty ring, alone
    (no session, no event loop): the best of five passes of about ``records`` records.
    The device's part is one store of ``IN_TAIL`` that frees the slots again."""
    from pdc_core.backend import Offset, RingHost, RingLayout, RingMemory

    memory = RingMemory.from_buffer(RingLayout(REQ, REQ, CAPACITY, sequenced_input=True))
    host = RingHost(memory)
    words = memory.words64
    tail = int(Offset.IN_TAIL) >> 3
    batch = np.zeros(size, REQ)
    repeat = max(10, records // size)
    best = float("inf")
    for _ in range(5):
        spent = 0.0
        for _ in range(repeat):
            start = time.perf_counter()
            host.write(batch)
            spent += time.perf_counter() - start
            words[tail] = host.in_head  # the device took them
        best = min(best, spent)
    return best * 1e9 / (repeat * size)


def _wake_call_ns() -> float:
    """ns of one call of a method that does nothing (what a CUDA ``wake`` costs)."""

    class Quiet:
        def wake(self) -> None:
            """Nothing, as ``CudaResidentKernel.wake``."""

    wake = Quiet().wake
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(10_000):
            wake()
        best = min(best, (time.perf_counter() - start) / 10_000)
    return best * 1e9


def measure_all(rounds: int, records: int) -> dict[str, dict[str, float]]:
    """The least over ``rounds`` of every figure (the round least slowed by other work
    on a shared machine), keyed ``"<library> <size>"``."""
    samples: dict[str, list[dict[str, float]]] = {}
    for _ in range(rounds):
        for library in LIBRARIES:
            for size in SIZES:
                samples.setdefault(f"{library} {size}", []).append(measure(size, library, records))
    return {
        key: {name: min(run[name] for run in runs) for name in runs[0]}
        for key, runs in samples.items()
    }


# -- report ----------------------------------------------------------------------------------


def print_table(results: dict[str, dict[str, float]], title: str) -> None:
    columns = (
        *PHASES,
        "host total",
        "device stand-in",
        "total",
        "collections per batch",
        "write alone",
    )
    print(f"\n{title}\n")
    print("| event loop, batch | " + " | ".join(columns) + " |")
    print("| --- |" + " ---: |" * len(columns))
    for key, figures in results.items():
        host = sum(figures[phase] for phase in PHASES)
        row = {**figures, "host total": host}
        cells = [f"{row[column]:.2f}" for column in columns]
        print(f"| {key} | " + " | ".join(cells) + " |")


def run_tree(tree: Path, rounds: int, records: int) -> dict[str, dict[str, float]]:
    """The measurements with ``tree``'s pdc-core, in a fresh process."""
    environment = {**os.environ, "PYTHONPATH": str(tree / "src")}
    done = subprocess.run(
        [
            sys.executable,
            __file__,
            "--json-out",
            "--rounds",
            str(rounds),
            "--records",
            str(records),
        ],
        env=environment,
        capture_output=True,
        text=True,
        timeout=1800,
        check=True,
    )
    result: dict[str, dict[str, float]] = json.loads(done.stdout.splitlines()[-1])
    return result


def compare(args: argparse.Namespace) -> None:
    trees = {"old": args.old.resolve(), "new": Path(__file__).resolve().parents[1]}
    runs: dict[str, list[dict[str, dict[str, float]]]] = {"old": [], "new": []}
    for pair in range(args.pairs):
        for name in ("old", "new") if pair % 2 == 0 else ("new", "old"):
            runs[name].append(run_tree(trees[name], args.rounds, args.records))
        print(f"pair {pair + 1}/{args.pairs} done", file=sys.stderr, flush=True)
    print(f"old: {trees['old']}, new: {trees['new']}, {args.pairs} pairs of {args.rounds} rounds")
    for name in ("old", "new"):
        medians = {
            key: {
                figure: statistics.median(run[key][figure] for run in runs[name])
                for figure in runs[name][0][key]
            }
            for key in runs[name][0]
        }
        print_table(medians, f"{name}: ns per record (the median over runs of the least per run)")
    print("\nnew/old, median of the per-pair ratios (below 1: the new tree is cheaper)\n")
    figures = ("write alone", "write", "collect", "host", "total")
    print("| event loop, batch | " + " | ".join(figures) + " |")
    print("| --- |" + " ---: |" * len(figures))
    for key in runs["old"][0]:
        cells = []
        for figure in figures:
            ratios = [
                _figure(new[key], figure) / _figure(old[key], figure)
                for old, new in zip(runs["old"], runs["new"], strict=True)
            ]
            cells.append(f"{statistics.median(ratios):.3f}")
        print(f"| {key} | " + " | ".join(cells) + " |")


def _figure(figures: dict[str, float], name: str) -> float:
    if name == "host":
        return sum(figures[phase] for phase in PHASES)
    return figures[name]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rounds", type=int, default=3, help="rounds per run (the least of each figure)"
    )
    parser.add_argument(
        "--records", type=int, default=1 << 19, help="records per measurement (about)"
    )
    parser.add_argument("--old", type=Path, help="another source tree to compare against")
    parser.add_argument("--pairs", type=int, default=4, help="old/new runs with --old")
    parser.add_argument("--json-out", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.old is not None:
        compare(args)
        return
    results = measure_all(args.rounds, args.records)
    if args.json_out:
        print(json.dumps(results))
        return
    print_table(
        results, "ns per record of request_batch, by phase (device stand-in; 8-byte records)"
    )


if __name__ == "__main__":
    main()
