"""pdc-ray's runner from two source trees: did a change cost its caller's paths anything?

For a change that moves the runner's code (``RemoteRunner`` split by role) without
meaning to change what runs: each tree runs a remote actor on pdc-ray's in-process
:class:`~pdc_ray.testing.FakeEngine` (no Ray: the host runs in the caller's process, so
the counts below are every Python call of the path, host included, and do not depend
on a cluster), under asyncio and trio, and reports per operation:

* the Python and C calls it makes (cProfile, median of ``--count`` operations): a
  lone ``ask`` (shipped by its caller), ``ask_many`` of 64 messages (the local mailbox
  and a shipper), a ``tell``;
* the p50 of a lone ``ask``'s round trip.

``--pairs`` runs of each tree, alternating which goes first; it prints the call counts
of each tree side by side and, per timing, the median of the per-pair quotients new/old
(1.00: no change). With ``--ray-pairs N`` it also runs ``benchmarks/ray_actor.py
--quick`` (a local Ray; about 100 s a run on a 2-core machine) N times from each tree,
alternating, and compares the ratios that script measures within each run (pdc's
``ask`` to a bare Ray call, ``ask_many`` to per-message calls)::

    git worktree add /tmp/old <commit before>
    python benchmarks/ray_runner_ab.py --old /tmp/old --new . --ray-pairs 2
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from pdc_core import Actor


class Echo(Actor[Any, Any]):
    """A remote actor that returns its message."""

    async def handle(self, message: Any) -> Any:
        return message


def _calls(profile: cProfile.Profile) -> int:
    """The calls ``profile`` counted, less its own ``disable()``."""
    return int(pstats.Stats(profile).total_calls) - 1  # type: ignore[attr-defined]


async def _count(operation: Callable[[], Awaitable[Any]], count: int) -> int:
    for _ in range(20):  # warm: caches, the loop binding
        await operation()
    calls = []
    for _ in range(count):
        profile = cProfile.Profile()
        profile.enable()
        await operation()
        profile.disable()
        calls.append(_calls(profile))
    return int(statistics.median(calls))


async def _measure(count: int) -> dict[str, float]:
    import pdc_ray
    from pdc_ray.testing import FakeEngine

    from pdc_core import open_nursery

    async with FakeEngine(reorder=0) as engine, open_nursery() as nursery:
        ref = await nursery.start_actor(Echo, placement=pdc_ray.on(engine=engine, heartbeat=60))
        batch = list(range(64))

        async def ask() -> None:
            assert await ref.ask(1) == 1

        async def ask_many() -> None:
            assert await ref.ask_many(batch) == batch

        async def tell() -> None:
            await ref.tell(1)

        result: dict[str, float] = {
            "calls: ask": await _count(ask, count),
            "calls: ask_many(64)": await _count(ask_many, count),
            "calls: tell": await _count(tell, count),
        }
        await ref.ask(0)  # the tells are handled
        times = []
        for _ in range(count * 5):
            started = time.perf_counter()
            await ask()
            times.append(time.perf_counter() - started)
        result["ask p50 (us)"] = statistics.median(times) * 1e6
        await ref.stop()
    return result


def _child(count: int) -> None:
    import anyio

    report = {}
    for library in ("asyncio", "trio"):
        measured = anyio.run(_measure, count, backend=library)
        report.update({f"{library} {key}": value for key, value in measured.items()})
    print(json.dumps(report))


def _run(tree: Path, count: int) -> dict[str, float]:
    path = ":".join(str(tree / part) for part in ("src", "plugins/pdc_ray/src"))
    done = subprocess.run(
        [sys.executable, __file__, "--child", "--count", str(count)],
        env={"PYTHONPATH": path, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if done.returncode:
        raise RuntimeError(f"the run from {tree} failed:\n{done.stderr[-3000:]}")
    result: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return result


_SECTION = re.compile(r"^(asyncio|trio): round trip")
_RATIO = re.compile(r"^\s*(pdc ask / [^:]+): median ratio ([\d.]+)")
_BATCH = re.compile(
    r"^\s*ask_many ([\d,]+) msg/s vs per-message Ray calls ([\d,]+) msg/s: ([\d.]+)x"
)


def _run_ray(tree: Path) -> dict[str, float]:
    """One ``ray_actor.py --quick`` run with ``tree``'s pdc: its ratios, by name."""
    parts = ("src", "plugins/pdc_cpu/src", "plugins/pdc_ray/src")
    done = subprocess.run(
        [sys.executable, str(tree / "benchmarks" / "ray_actor.py"), "--quick"],
        cwd=tree,
        env={"PYTHONPATH": ":".join(str(tree / part) for part in parts), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    ratios: dict[str, float] = {}
    library = ""
    for line in done.stdout.splitlines():
        if match := _SECTION.match(line):
            library = match[1]
        elif match := _RATIO.match(line):
            ratios[f"{library} {match[1]}"] = float(match[2])
        elif match := _BATCH.match(line):
            ratios[f"{library} ask_many (msg/s)"] = float(match[1].replace(",", ""))
            ratios[f"{library} per-message Ray calls (msg/s)"] = float(match[2].replace(",", ""))
            ratios[f"{library} ask_many / per-message Ray calls"] = float(match[3])
    if done.returncode or not ratios:
        raise RuntimeError(
            f"ray_actor.py from {tree} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
        )
    return ratios


def _compare(runs: dict[str, list[dict[str, float]]], digits: int) -> None:
    print("| measure | old (runs) | new (runs) | new/old (median of pairs) |")
    print("|---------|-----------:|-----------:|-----:|")
    for key in runs["old"][0]:
        shown = [
            " ".join(f"{run[key]:.{digits}f}" for run in runs[side]) for side in ("old", "new")
        ]
        pairs = zip(runs["old"], runs["new"], strict=True)
        ratio = statistics.median(n[key] / o[key] for o, n in pairs)
        print(f"| {key} | {shown[0]} | {shown[1]} | {ratio:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, help="the tree before")
    parser.add_argument("--new", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--count", type=int, default=100, help="operations per measure")
    parser.add_argument("--ray-pairs", type=int, default=0, help="ray_actor.py runs per tree")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.count)
        return
    if args.old is None:
        parser.error("--old is required")
    runs: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
    for pair in range(args.pairs):
        order = ("old", "new") if pair % 2 == 0 else ("new", "old")
        for side in order:
            runs[side].append(_run(getattr(args, side), args.count))
    print(
        f"{args.pairs} pairs, {args.count} operations per measure; python {sys.version.split()[0]}"
    )
    if args.pairs:
        _compare(runs, 0)
    if args.ray_pairs:
        ray_runs: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
        for pair in range(args.ray_pairs):
            order = ("old", "new") if pair % 2 == 0 else ("new", "old")
            for side in order:
                ray_runs[side].append(_run_ray(getattr(args, side)))
        print(f"\nbenchmarks/ray_actor.py --quick, {args.ray_pairs} pairs (ratios within each run)")
        _compare(ray_runs, 3)


if __name__ == "__main__":
    main()
