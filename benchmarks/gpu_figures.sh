#!/usr/bin/env bash
# gpu_figures.sh -- the CUDA path's figures, in one call on a GPU machine, within a budget.
#
# Run it from the repository root on a machine with an NVIDIA GPU and CuPy. It measures,
# each stage under its own deadline so that a hang costs only that stage:
#   1. benchmarks/cuda_contexts.py --quick: where a resident kernel runs (its own context,
#      a green context, the primary one) side by side: the idle round trip, the round
#      trip and the user-kernel rate beside a loop of user kernels, and whether CuPy's
#      first op, a new compile, cudaFreeHost and a synchronize return beside it
#                                                         -> contexts.log, contexts.json
#   2. pdc bench --backend cuda --quick: pdc's resident paths (request awaiting and
#      spinning, a kernel actor's ask, 4 KiB and 64 KiB records) against the
#      hand-written mapped-memory floor and the cuda.bindings and CUDA-graph launches,
#      both event loops, as JSON (and a plot where matplotlib imports)
#                                                         -> bench_cuda.json (.png), .err
#   3. benchmarks/cuda_floor.py --quick --spin-variants: the floor and pdc's request at
#      8 B / 4 KiB / 64 KiB with the waiting variants, and Python calls per request
#                                                         -> cuda_floor.log
#   4. benchmarks/cuda_ring.py --batched --quick: request_batch of whole rings of 8-byte
#      records and the host's share of it per record (pack, stamp, publish, collect)
#                                                         -> batched.log, batched.json
# and the versions the figures belong to                 -> versions.txt
#
# Output goes to $OUT (default ./gpu_figures_out). PDC_FIGURES_BUDGET (seconds, default
# 280) caps the whole script. pdc is used from this tree: if `import pdc_core` fails,
# src/ and the plugins' src/ go on PYTHONPATH with a small .dist-info folder declaring
# pdc's entry points (backends are found only through them; benchmarks/dist_shim.py
# writes it); wheels carried in .whl/ (trio, sniffio, outcome, matplotlib) are put on
# the path first.
# Record what it prints in docs/benchmarks.md with the date, GPU, driver, CUDA and CuPy.
#
# PDC_FIGURES_HOST=1 is its dry run without a GPU, on pdc-cuda's host build (g++ and NVRTC):
# the same stages, deadlines and shim, with stages 1 and 3 given --host (every placement and
# cell of stage 1 on pdc_cuda.testing.HostCudaBackend, no CuPy), and stage 2 on that
# backend too, which the shim's pdc-cuda entry point loads as the cuda backend
# (benchmarks/figures_host_plugin.py). Every stage is expected to exit 0. Its times mean
# nothing.

set -u
ROOT=$PWD
if [ ! -d src/pdc_core ] || [ ! -d plugins/pdc_cuda/src/pdc_cuda ]; then
    echo "gpu_figures: run it from the pdc repository root" >&2
    exit 2
fi
OUT="${OUT:-$ROOT/gpu_figures_out}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
DEADLINE=$(( $(date +%s) + ${PDC_FIGURES_BUDGET:-280} ))
# stage_time WANTED: min(WANTED, seconds left - 5); 0 when under 20 s are left.
stage_time() {
    local left=$(( DEADLINE - $(date +%s) - 5 ))
    if [ "$left" -lt 20 ]; then echo 0; elif [ "$left" -lt "$1" ]; then echo "$left"; else echo "$1"; fi
}

HOST="${PDC_FIGURES_HOST:-0}"
if [ "$HOST" != 0 ] && [ "$HOST" != 1 ]; then
    echo "gpu_figures: PDC_FIGURES_HOST must be 0 (a GPU run) or 1 (the dry run), not '$HOST'" >&2
    exit 2
fi
# Wheels and shim live in a folder of this run's own (two runs at once do not collide).
TMP=$(mktemp -d "${TMPDIR:-/tmp}/pdc-gpu-figures.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
if ls .whl/*.whl >/dev/null 2>&1; then
    WHEELS=$TMP/wheels
    "$PY" -m pip install -q --no-index --no-deps --target "$WHEELS" .whl/*.whl \
        && export PYTHONPATH="$WHEELS${PYTHONPATH:+:$PYTHONPATH}"
fi
# The dry run always takes this path (the one a bare GPU machine takes), with pdc-cuda's
# entry point on benchmarks/figures_host_plugin.py: the host build as the cuda backend.
CUDA_PLUGIN=pdc_cuda
if [ "$HOST" = 1 ]; then
    CUDA_PLUGIN=figures_host_plugin
    export PYTHONPATH="$ROOT/benchmarks${PYTHONPATH:+:$PYTHONPATH}"
fi
# The shim: benchmarks/dist_shim.py (it imports nothing of pdc) writes the .dist-info
# folders and prints the shim's and the sources' PYTHONPATH entries.
if [ "$HOST" = 1 ] || ! "$PY" -c 'import pdc_core, pdc_cuda' >/dev/null 2>&1; then
    SHIM_PATH=$("$PY" benchmarks/dist_shim.py "$TMP/shim" --cuda-plugin "$CUDA_PLUGIN") || exit 2
    export PYTHONPATH="$SHIM_PATH${PYTHONPATH:+:$PYTHONPATH}"
fi

{
    date -u +%Y-%m-%dT%H:%M:%SZ
    git rev-parse --short HEAD 2>/dev/null || echo "(no git)"
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
    else
        echo "nvidia-smi: not found"
    fi
    # One line whatever fails: no CuPy, or a CuPy without a CUDA runtime or driver.
    "$PY" - <<'EOF' 2>&1
import sys

import numpy

line = f"python {sys.version.split()[0]} numpy {numpy.__version__}"
try:
    import cupy

    line += f" cupy {cupy.__version__}"
    runtime = cupy.cuda.runtime
    line += f" cuda runtime {runtime.runtimeGetVersion()} driver {runtime.driverGetVersion()}"
except Exception as exc:
    line += f" ({type(exc).__name__}: {exc})"
print(line)
EOF
    [ "$HOST" = 1 ] && echo "PDC_FIGURES_HOST=1: a dry run on pdc-cuda's host build, no GPU figures"
} > "$OUT/versions.txt"
cat "$OUT/versions.txt"

run_stage() { # run_stage NAME WANTED-SECONDS STDOUT-FILE STDERR-FILE COMMAND...
    local name=$1 seconds out=$3 err=$4 rc
    seconds=$(stage_time "$2")
    shift 4
    if [ "$seconds" -eq 0 ]; then
        echo "$name: skipped (budget spent)" | tee -a "$err"
        return
    fi
    timeout -k 5 "$seconds" "$@" >> "$out" 2>> "$err"
    rc=$?
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        echo "$name: cut by its deadline (exit $rc, limit ${seconds} s)" | tee -a "$err"
    else
        echo "$name: exit $rc (limit ${seconds} s)" | tee -a "$err"
    fi
}

HOST_FLAG=()
[ "$HOST" = 1 ] && HOST_FLAG=(--host)
run_stage contexts 110 "$OUT/contexts.log" "$OUT/contexts.log" \
    "$PY" benchmarks/cuda_contexts.py --quick --markdown --json "$OUT/contexts.json" "${HOST_FLAG[@]}"
PLOT=()
"$PY" -c 'import matplotlib' >/dev/null 2>&1 && PLOT=(--plot "$OUT/bench_cuda.png")
run_stage "pdc bench" 120 "$OUT/bench_cuda.json" "$OUT/bench_cuda.err" \
    "$PY" -m pdc_core bench --backend cuda --quick --json "${PLOT[@]}"
run_stage cuda_floor 60 "$OUT/cuda_floor.log" "$OUT/cuda_floor.log" \
    "$PY" benchmarks/cuda_floor.py --quick --spin-variants "${HOST_FLAG[@]}"
tail -40 "$OUT/contexts.log"
tail -30 "$OUT/cuda_floor.log"
# Stage 4 last (seconds on a GPU); in the dry run on the host build too.
run_stage batched 30 "$OUT/batched.log" "$OUT/batched.log" \
    "$PY" benchmarks/cuda_ring.py --batched --quick --json "$OUT/batched.json" "${HOST_FLAG[@]}"
tail -5 "$OUT/batched.log"
