"""Statistics and report helpers of ``pdc bench`` and the ``benchmarks/`` scripts.

Generic on purpose (no import of the rest of pdc): any benchmark may use them.

* :func:`summarize` -- count, mean, extremes and percentiles of timing samples
  (NumPy's, linear interpolation).
* :func:`table` -- a Markdown table (paste-able into ``docs/benchmarks.md``).
* :func:`environment` -- Python, OS, CPU count and the versions of named packages.
* :func:`ratio` -- a ratio formatted for a table.
"""

from __future__ import annotations

import gc
import math
import os
import platform
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata

import numpy as np

__all__ = [
    "Summary",
    "command_line",
    "print_header",
    "environment",
    "gc_paused",
    "ratio",
    "summarize",
    "table",
    "timed",
]


@dataclass(frozen=True)
class Summary:
    """Percentiles of a set of samples, in the samples' unit."""

    count: int
    mean: float
    p50: float
    p90: float
    p99: float
    minimum: float
    maximum: float

    def scaled(self, factor: float) -> Summary:
        """The same summary with every value multiplied by ``factor`` (unit change)."""
        return Summary(
            self.count,
            self.mean * factor,
            self.p50 * factor,
            self.p90 * factor,
            self.p99 * factor,
            self.minimum * factor,
            self.maximum * factor,
        )


def summarize(samples: Iterable[float]) -> Summary:
    """Summarize timing samples (any unit)."""
    data = np.fromiter(samples, dtype=np.float64)
    if not data.size:
        raise ValueError("no samples")
    p50, p90, p99 = np.percentile(data, (50, 90, 99))
    return Summary(
        count=int(data.size),
        mean=float(data.mean()),
        p50=float(p50),
        p90=float(p90),
        p99=float(p99),
        minimum=float(data.min()),
        maximum=float(data.max()),
    )


def ratio(numerator: float, denominator: float, digits: int = 2) -> str:
    """``numerator / denominator`` formatted, or ``n/a`` when it cannot be computed."""
    if not denominator or math.isnan(numerator) or math.isnan(denominator):
        return "n/a"
    return f"{numerator / denominator:.{digits}f}"


def table(headers: Sequence[str], rows: Iterable[Sequence[object]], align: str = "") -> str:
    """A Markdown table. ``align`` is one letter per column: ``l`` or ``r`` (default l)."""
    rendered = [[str(cell) for cell in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in rendered:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    align = align.ljust(len(headers), "l")

    def line(cells: Sequence[str]) -> str:
        padded = [
            cell.rjust(widths[i]) if align[i] == "r" else cell.ljust(widths[i])
            for i, cell in enumerate(cells)
        ]
        return "| " + " | ".join(padded) + " |"

    rule = (
        "| "
        + " | ".join(
            ("-" * (w - 1) + ":") if align[i] == "r" else "-" * w for i, w in enumerate(widths)
        )
        + " |"
    )
    return "\n".join([line(list(headers)), rule, *(line(row) for row in rendered)])


def environment(packages: Iterable[str] = ()) -> dict[str, str]:
    """Python, platform, CPU count and installed versions of ``packages``."""
    info = {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": str(os.cpu_count()),
    }
    for name in packages:
        try:
            info[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            info[name] = "not installed"
    return info


@contextmanager
def gc_paused() -> Iterator[None]:
    """Collect garbage, then keep the collector off for the block."""
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def timed(fn: Callable[[], object]) -> float:
    """Seconds taken by one call of ``fn``."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def command_line() -> str:
    """The command that ran this benchmark, for the record."""
    return " ".join(["python", *sys.argv])


def print_header(title: str, packages: Iterable[str], *lines: str) -> dict[str, str]:
    """Print a benchmark's Markdown title, command, environment and ``lines``.

    Returns the environment (for a JSON record).
    """
    env = environment(packages)
    print(f"# {title}")
    print()
    print("Command: " + command_line())
    print("Environment: " + ", ".join(f"{k} {v}" for k, v in env.items()))
    for line in lines:
        print(line)
    print()
    return env
