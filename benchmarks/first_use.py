"""What a first ``get_backend()`` costs with every plugin installed, against cpu alone.

Run from the repository root::

    python benchmarks/first_use.py             # 21 rounds
    python benchmarks/first_use.py --quick     # 7 rounds

Each round starts two fresh interpreters, in alternating order: one with every
installed plugin loaded (``PDC_PLUGINS`` unset), one with ``PDC_PLUGINS=cpu``. Each
times ``import pdc_core`` followed by ``pdc_core.get_backend()`` (the default backend;
``PDC_BACKEND`` is unset) with ``time.perf_counter`` inside the child, so interpreter
start-up is not counted, and reports which heavy modules (CuPy, MLX, numba, Ray) it
left in ``sys.modules``.

The target (issue 34): on a machine where only cpu can run, the difference of the
medians is at most 10 ms, and no heavy module is imported. Absolute times depend on
the machine and its load; the difference and the ratio are measured side by side.
``import pdc_core`` is the same code in both settings and most of the time, so its
noise swamps a few milliseconds on a shared machine: the script also reports the
difference of the medians of ``get_backend()`` alone (loading the plugins, probing,
making the backend), where the settings differ.

With ``PYTHONDONTWRITEBYTECODE`` set (and no ``.pyc`` files already there), every
import compiles its module from source, which an installed package does not; the
header says so. ``PYTHONPYCACHEPREFIX=/some/dir`` gives bytecode without writing
into the tree.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from pdc_core._cli._bench_stats import print_header, table

HEAVY = ("cupy", "mlx", "numba", "ray")

CHILD = f"""
import json, sys, time
start = time.perf_counter()
import pdc_core
imported = time.perf_counter()
backend = pdc_core.get_backend()
done = time.perf_counter()
heavy = sorted(name for name in {HEAVY!r} if name in sys.modules)
print(json.dumps({{
    "seconds": done - start, "choice": done - imported, "backend": backend.name, "heavy": heavy
}}))
"""


def measure(plugins: str | None) -> dict[str, object]:
    """One fresh interpreter's first use, with ``PDC_PLUGINS=plugins`` (unset: ``None``)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PDC_PLUGINS", "PDC_BACKEND")}
    if plugins is not None:
        env["PDC_PLUGINS"] = plugins
    done = subprocess.run(
        [sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True
    )
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="7 rounds instead of 21")
    parser.add_argument("--rounds", type=int, help="rounds (each: one child per setting)")
    args = parser.parse_args()
    rounds = args.rounds or (7 if args.quick else 21)
    bytecode = (
        "no bytecode written (PYTHONDONTWRITEBYTECODE): imports compile from source"
        if os.environ.get("PYTHONDONTWRITEBYTECODE")
        else "bytecode cached"
    )
    print_header(
        "First use: import pdc_core + get_backend()",
        ["pdc-core", "pdc-cpu", "pdc-cuda", "pdc-metal", "pdc-ray", "cupy", "mlx", "numpy"],
        f"Rounds: {rounds}, each one fresh interpreter per setting, order alternating; {bytecode}.",
    )
    settings = {"every plugin (PDC_PLUGINS unset)": None, "PDC_PLUGINS=cpu": "cpu"}
    times: dict[str, list[float]] = {name: [] for name in settings}
    choices: dict[str, list[float]] = {name: [] for name in settings}
    seen: dict[str, tuple[str, list[str]]] = {}
    for i in range(rounds):
        order = list(settings.items())
        if i % 2:
            order.reverse()
        for name, plugins in order:
            result = measure(plugins)
            times[name].append(float(result["seconds"]))  # type: ignore[arg-type]
            choices[name].append(float(result["choice"]))  # type: ignore[arg-type]
            seen[name] = (str(result["backend"]), list(result["heavy"]))  # type: ignore[call-overload]
    rows = []
    for name, samples in times.items():
        backend, heavy = seen[name]
        rows.append(
            [
                name,
                backend,
                f"{statistics.median(samples) * 1e3:.1f}",
                f"{min(samples) * 1e3:.1f}",
                f"{statistics.median(choices[name]) * 1e3:.1f}",
                ", ".join(heavy) or "none",
            ]
        )
    headers = ["setting", "backend", "median ms", "min ms", "get_backend() median ms"]
    print(table([*headers, "heavy modules"], rows, "llrrrl"))
    every, cpu_only = (statistics.median(times[name]) for name in settings)
    every_choice, cpu_choice = (statistics.median(choices[name]) for name in settings)
    print()
    print(
        f"get_backend() alone, every plugin - cpu only: {(every_choice - cpu_choice) * 1e3:+.1f} ms"
    )
    print(
        f"every plugin - cpu only: {(every - cpu_only) * 1e3:+.1f} ms (target <= 10 ms); "
        f"ratio {every / cpu_only:.2f}x"
    )


if __name__ == "__main__":
    main()
