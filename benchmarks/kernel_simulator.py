"""pdc's kernel simulator (the cpu backend) against numba's simulator and NumPy, side by side.

Run from the repository root (pdc-core, pdc-cpu and numba-cuda installed)::

    python benchmarks/kernel_simulator.py            # 3 rounds
    python benchmarks/kernel_simulator.py --quick    # 1 round, smaller problems

Three kernels written for numba.cuda (``from numba import cuda``; pdc swaps numba's
module for its own on the cpu backend):

- ``tree_reduction``: the block sum of docs/guide-kernels.md (256 threads, shared
  memory, ``while s > 0: if tid < s: ...; syncthreads()``);
- ``block_scan``: an inclusive Hillis-Steele scan of each block in shared memory (a new
  divergent branch, ``t >= offset``, between barriers every round);
- ``monte_carlo_pi``: every thread draws points with its own xorshift generator and
  counts those inside the unit circle (a branch per draw in a per-thread loop).

Each is launched as ``kernel[grid, block](...)`` through pdc (``pdc_core.kernel`` of the
body, on the cpu backend; a first, untimed launch of another size before the timed
ones, as a warm numba dispatcher), by numba's CUDA simulator
(``NUMBA_ENABLE_CUDASIM=1``, in a subprocess so that it does not change this one's
numba), and as the equivalent NumPy expression; every result is checked against
NumPy's. numba's simulator runs one OS thread per CUDA thread, so the problems are
sized for it to take a few seconds; pdc and NumPy run the same problems. Ratios are
per round (numba's time / pdc's time), so they hold on any machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

# numba's module, as kernels written for numba import it: the child process imports it
# with NUMBA_ENABLE_CUDASIM=1 (numba's simulator); pdc swaps it for pdc_core.cuda
from numba import cuda

THREADS = 256


def tree_reduction(data: Any, out: Any) -> None:
    shared = cuda.shared.array(256, dtype=np.float32)
    i = cuda.grid(1)
    tid = cuda.threadIdx.x
    if i < len(data):
        shared[tid] = data[i]
    else:
        shared[tid] = 0
    cuda.syncthreads()
    s = 128
    while s > 0:
        if tid < s:
            shared[tid] += shared[tid + s]
        cuda.syncthreads()
        s //= 2
    if tid == 0:
        out[cuda.blockIdx.x] = shared[0]


def block_scan(data: Any, out: Any) -> None:
    temp = cuda.shared.array(256, dtype=np.int64)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    temp[t] = data[i] if i < len(data) else 0
    cuda.syncthreads()
    offset = 1
    while offset < cuda.blockDim.x:
        value = temp[t - offset] if t >= offset else 0
        cuda.syncthreads()
        temp[t] += value
        cuda.syncthreads()
        offset *= 2
    if i < len(data):
        out[i] = temp[t]


def monte_carlo_pi(seeds: Any, hits: Any, draws: Any) -> None:
    i = cuda.grid(1)
    if i < len(seeds):
        state = seeds[i]
        inside = 0
        for _ in range(draws):
            state ^= (state << np.uint32(13)) & np.uint32(0xFFFFFFFF)
            state ^= state >> np.uint32(17)
            state ^= (state << np.uint32(5)) & np.uint32(0xFFFFFFFF)
            x = (state & np.uint32(0xFFFF)) / 65536.0
            y = (state >> np.uint32(16)) / 65536.0
            if x * x + y * y <= 1.0:
                inside += 1
        hits[i] = inside


#: The kernels, by name.
KERNELS: dict[str, Callable[..., Any]] = {
    "tree_reduction": tree_reduction,
    "block_scan": block_scan,
    "monte_carlo_pi": monte_carlo_pi,
}


def problems(quick: bool) -> dict[str, tuple[int, tuple[Any, ...]]]:
    """Per kernel: the number of blocks and the host arguments (fresh each call)."""
    rng = np.random.default_rng(46)
    blocks = 8 if quick else 32
    n = blocks * THREADS
    values = rng.integers(0, 100, n).astype(np.float32)
    seeds = rng.integers(1, 2**32, n, dtype=np.uint64).astype(np.uint32)
    return {
        "tree_reduction": (blocks, (values, np.zeros(blocks, np.float32))),
        "block_scan": (blocks, (values.astype(np.int64), np.zeros(n, np.int64))),
        "monte_carlo_pi": (blocks, (seeds, np.zeros(n, np.int64), 64)),
    }


def numpy_results(name: str, args: tuple[Any, ...]) -> tuple[float, Any]:
    """NumPy's answer for ``name`` and the time it took."""
    started = time.perf_counter()
    if name == "tree_reduction":
        result: Any = args[0].reshape(-1, THREADS).sum(axis=1, dtype=np.float32)
    elif name == "block_scan":
        result = np.cumsum(args[0].reshape(-1, THREADS), axis=1).reshape(-1)
    else:
        seeds, _, draws = args
        state = seeds.copy()
        inside = np.zeros(len(seeds), np.int64)
        mask = np.uint32(0xFFFFFFFF)
        for _ in range(draws):
            state ^= (state << np.uint32(13)) & mask
            state ^= state >> np.uint32(17)
            state ^= (state << np.uint32(5)) & mask
            x = (state & np.uint32(0xFFFF)) / 65536.0
            y = (state >> np.uint32(16)) / 65536.0
            inside += x * x + y * y <= 1.0
        result = inside
    return time.perf_counter() - started, result


def copies(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args)


def time_launches(kernels: dict[str, Any], quick: bool) -> dict[str, Any]:
    """Per kernel: the first launch's time, the second's, and the second's output."""
    found: dict[str, Any] = {}
    for name, (blocks, args) in problems(quick).items():
        kernel = kernels[name]
        times = []
        for _ in range(2):  # the first launch: numba checks the body, pdc analyses it
            run = copies(args)
            started = time.perf_counter()
            kernel[blocks, THREADS](*run)
            times.append(time.perf_counter() - started)
        found[name] = {"first": times[0], "second": times[1], "out": run[1].tolist()}
    return found


def numba_main(quick: bool) -> None:
    """In the subprocess: numba's CUDA simulator, printing one JSON line."""
    assert os.environ.get("NUMBA_ENABLE_CUDASIM") == "1", "run by numba_round"
    kernels = {name: cuda.jit(body) for name, body in KERNELS.items()}
    print(json.dumps(time_launches(kernels, quick)))


def numba_round(quick: bool) -> dict[str, Any]:
    command = [sys.executable, __file__, "--numba-child"] + (["--quick"] if quick else [])
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
    result = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    found: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return found


def pdc_round(quick: bool) -> dict[str, Any]:
    import pdc_core

    kernels = {name: pdc_core.kernel(body, backend="cpu") for name, body in KERNELS.items()}
    return time_launches(kernels, quick)


def check(name: str, got: Any, expected: Any) -> None:
    if name == "tree_reduction":
        np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-5)
    else:
        np.testing.assert_array_equal(np.asarray(got), expected)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 round, smaller problems")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--numba-child", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.numba_child:
        numba_main(options.quick)
        return
    rounds = 1 if options.quick else options.rounds
    import numba
    import numba_cuda

    print(
        f"numpy {np.__version__}, numba {numba.__version__}, "
        f"numba-cuda {numba_cuda.__version__}, python {sys.version.split()[0]}"
    )
    ratios: dict[str, list[float]] = {}
    rows: dict[str, list[tuple[float, float, float, float]]] = {}
    for round_number in range(rounds):
        # alternate who goes first, round by round
        if round_number % 2 == 0:
            ours, theirs = pdc_round(options.quick), numba_round(options.quick)
        else:
            theirs, ours = numba_round(options.quick), pdc_round(options.quick)
        for name, (_, args) in problems(options.quick).items():
            numpy_time, expected = numpy_results(name, copies(args))
            check(name, ours[name]["out"], expected)
            check(name, theirs[name]["out"], expected)
            ratio = theirs[name]["second"] / ours[name]["second"]
            ratios.setdefault(name, []).append(ratio)
            rows.setdefault(name, []).append(
                (ours[name]["first"], ours[name]["second"], theirs[name]["second"], numpy_time)
            )
    threads = {name: blocks * THREADS for name, (blocks, _) in problems(options.quick).items()}
    print(
        f"{'kernel':<16}{'threads':>9}{'pdc 1st s':>11}{'pdc s':>9}{'numba sim s':>13}"
        f"{'numpy ms':>10}{'numba/pdc':>11}"
    )
    for name, measured in rows.items():
        first, second, theirs_s, numpy_s = (
            statistics.median(col) for col in zip(*measured, strict=True)
        )
        ratio = statistics.median(ratios[name])
        low, high = min(ratios[name]), max(ratios[name])
        print(
            f"{name:<16}{threads[name]:>9,}{first:>11.3f}{second:>9.3f}{theirs_s:>13.3f}"
            f"{numpy_s * 1e3:>10.3f}{ratio:>10.0f}x  (rounds: {low:.0f}-{high:.0f}x)"
        )


if __name__ == "__main__":
    main()
