"""pdc's kernel simulator from two source trees, run alternately: did a change cost it
anything?

Each run imports one tree's pdc-core and pdc-cpu in a subprocess and times the three
kernels of ``kernel_simulator.py`` (the tree reduction, the shared-memory scan, Monte
Carlo pi; pdc only, no numba simulator), each launched ``--launches`` times after a
first, untimed launch; a run's figure per kernel is the median of its launches. The
trees run ``--pairs`` times each, alternating which goes first, so that the machine's
load falls on both alike; printed per kernel: each tree's median over runs and the
median of the per-pair quotients new/old (1.00: no change; lower is faster).

    git worktree add --detach /tmp/old <commit before>
    python benchmarks/kernel_simulator_ab.py --old /tmp/old --new .
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

#: Run in the subprocess, from the tree's ``benchmarks`` folder (argv: launches).
CHILD = """
import json, statistics, sys, time
import pdc_core
import kernel_simulator as k

launches = int(sys.argv[1])
found = {}
for name, (blocks, args) in k.problems(False).items():
    kernel = pdc_core.kernel(k.KERNELS[name], backend="cpu")
    kernel[blocks, k.THREADS](*k.copies(args))  # the first launch analyses the body
    times = []
    for _ in range(launches):
        run = k.copies(args)
        started = time.perf_counter()
        kernel[blocks, k.THREADS](*run)
        times.append(time.perf_counter() - started)
    found[name] = statistics.median(times)
print(json.dumps(found))
"""


def run(tree: Path, launches: int) -> dict[str, float]:
    """One run of the three kernels with ``tree``'s pdc-core and pdc-cpu."""
    environment = {"PYTHONPATH": f"{tree / 'src'}:{tree / 'plugins' / 'pdc_cpu' / 'src'}"}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(launches)],
        cwd=tree / "benchmarks",
        env=environment,
        capture_output=True,
        text=True,
        timeout=1800,
        check=True,
    )
    found: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, required=True, help="the tree before")
    parser.add_argument("--new", type=Path, required=True, help="the tree after")
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--launches", type=int, default=5)
    options = parser.parse_args()
    old_runs: list[dict[str, float]] = []
    new_runs: list[dict[str, float]] = []
    for pair in range(options.pairs):
        if pair % 2 == 0:
            old_runs.append(run(options.old.resolve(), options.launches))
            new_runs.append(run(options.new.resolve(), options.launches))
        else:
            new_runs.append(run(options.new.resolve(), options.launches))
            old_runs.append(run(options.old.resolve(), options.launches))
    print(f"{'kernel':16} {'old s':>8} {'new s':>8}  new/old (per pair)")
    for name in old_runs[0]:
        old = statistics.median(runs[name] for runs in old_runs)
        new = statistics.median(runs[name] for runs in new_runs)
        quotients = sorted(n[name] / o[name] for o, n in zip(old_runs, new_runs, strict=True))
        spread = f"{quotients[0]:.2f}-{quotients[-1]:.2f}"
        print(f"{name:16} {old:8.4f} {new:8.4f}  {statistics.median(quotients):.2f} ({spread})")


if __name__ == "__main__":
    main()
