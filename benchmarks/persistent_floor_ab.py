"""``persistent_floor.py`` from two source trees, run alternately: did a change cost the
cpu backend's persistent kernels anything?

Each run of ``persistent_floor.py`` prints pdc's ratios to its own floors measured in
the same run (a hand-written worker thread, a thread hand-off), which cancels most of
the machine's load. This runs it ``--pairs`` times from each tree, alternating which
goes first, and prints, per ratio, the median over runs for each tree and the median
of the per-pair quotients new/old (1.00: no change; for round trips lower is better,
for ``request_batch`` higher is).

    git worktree add /tmp/old <commit before>; git worktree add /tmp/new <commit>
    .venv/bin/python benchmarks/persistent_floor_ab.py --old /tmp/old --new /tmp/new
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
from pathlib import Path

RATIO = re.compile(r"\|\s*(asyncio|trio)\s*\|\s*(pdc [^|]*?/[^|]*?)\s*\|\s*([\d.]+) \(")


def run(tree: Path) -> dict[tuple[str, str], float]:
    """One run of ``persistent_floor.py`` with ``tree``'s pdc-core and pdc-cpu."""
    environment = {"PYTHONPATH": f"{tree / 'src'}:{tree / 'plugins' / 'pdc_cpu' / 'src'}"}
    done = subprocess.run(
        [sys.executable, str(tree / "benchmarks" / "persistent_floor.py")],
        cwd=tree,
        env=environment,
        capture_output=True,
        text=True,
        timeout=1800,
        check=True,
    )
    ratios = {}
    for line in done.stdout.splitlines():
        match = RATIO.match(line)
        if match:
            ratios[match[1], match[2]] = float(match[3])
    if not ratios:
        raise RuntimeError(f"persistent_floor.py from {tree} printed no ratios:\n{done.stdout}")
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, required=True, help="source tree before")
    parser.add_argument("--new", type=Path, required=True, help="source tree after")
    parser.add_argument("--pairs", type=int, default=6)
    args = parser.parse_args()
    trees = {"old": args.old.resolve(), "new": args.new.resolve()}
    results: dict[str, list[dict[tuple[str, str], float]]] = {"old": [], "new": []}
    for pair in range(args.pairs):
        for name in ("old", "new") if pair % 2 == 0 else ("new", "old"):
            results[name].append(run(trees[name]))
        print(f"pair {pair + 1}/{args.pairs} done", file=sys.stderr, flush=True)
    print(f"old: {trees['old']}, new: {trees['new']}, {args.pairs} pairs")
    print("| loop | ratio (same run) | old (median) | new (median) | new/old (median per pair) |")
    print("|---|---|---:|---:|---:|")
    for key in sorted(results["old"][0]):
        old = [run_[key] for run_ in results["old"]]
        new = [run_[key] for run_ in results["new"]]
        per_pair = [n / o for o, n in zip(old, new, strict=True)]
        print(
            f"| {key[0]} | {key[1]} | {statistics.median(old):.2f} | "
            f"{statistics.median(new):.2f} | {statistics.median(per_pair):.3f} |"
        )


if __name__ == "__main__":
    main()
