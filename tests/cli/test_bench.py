"""``pdc bench``: the quick suite, JSON, the plot and its missing-extra message."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

import anyio
import numpy as np
import pytest
from support.host_memory_backend import HostMemoryBackend
from support.subprocess_support import interrupt_once_running, start_interruptible

from pdc_core import Capability
from pdc_core._cli import main
from pdc_core._cli._bench import BenchResult, _no_ratio, run_suite


def test_quick_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--quick", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["interrupted"] is False
    for backend in ("asyncio", "trio"):
        ask = payload["latency"][f"{backend} / pdc ask"]
        assert 0 < ask["p50_us"] <= ask["p99_us"]
        assert "p50_vs_bare anyio streams" in ask
        assert payload["throughput"][f"{backend} / pdc tell_many -> handle_batch"]["msgs_per_s"] > 0
        # The persistent-kernel rows, each against dispatching a task per message.
        kernel = payload["latency"][f"{backend} / persistent kernel (cpu)"]
        assert "p50_vs_a task per message (cpu)" in kernel
        batched = payload["throughput"][f"{backend} / persistent kernel (cpu), request_batch"]
        # Like for like: the same ring-full batches, one task each (not a task per message).
        assert list(k for k in batched if k.startswith("x_vs_")) == [
            "x_vs_a task per ring-full (cpu), all in flight"
        ]
        assert batched["x_vs_a task per ring-full (cpu), all in flight"] > 0


@pytest.mark.parametrize("async_backend", ["asyncio", "trio"])
def test_a_backend_s_resident_ring_against_its_floor(
    async_backend: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--backend NAME``: the resident ring of NAME (awaiting, spinning, an actor's
    ask), each against the ring's floor: the same kernel driven from Python with no
    session (``RingHost.put_one``/``take_one``)."""
    argv = ["bench", "--quick", "--n", "40", "--backend", "cpu", "--async-backend", async_backend]
    assert main([*argv, "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["settings"]["backend"] == "cpu"
    latency = payload["latency"]
    floor = latency[f"{async_backend} / ring floor (cpu)"]
    assert floor["baseline"] is True
    assert 0 < floor["p50_us"] <= floor["p99_us"]
    for path in ("resident ring (cpu)", "resident ring (cpu), spin", "resident actor ask (cpu)"):
        assert latency[f"{async_backend} / {path}"]["p50_vs_ring floor (cpu)"] > 0


#: A plugin with a backend of persistent kernels (the cpu backend's, under another name)
#: and, through ``pdc_register_benchmarks``, a floor of its own and a path held against it.
RINGED = """
import time

import anyio.lowlevel
from pdc_cpu import CpuBackend

from pdc_core.backend import BenchmarkPath, HostWorkerKernel, hookimpl

LISTED = []


class Ringed(CpuBackend):
    name = "ringed"
    distribution = "pdc-ringed"

    def launch_persistent_kernel(self, kernel, rings, **options):
        return HostWorkerKernel.launch(self, kernel, rings, **options)  # the "ringed" body


async def checkpoints(n, warmup):
    samples = []
    for i in range(warmup + n):
        start = time.perf_counter_ns()
        await anyio.lowlevel.checkpoint()
        if i >= warmup:
            samples.append(time.perf_counter_ns() - start)
    return samples


async def two_checkpoints(n, warmup):
    once = await checkpoints(2 * n, 2 * warmup)
    return [once[i] + once[i + 1] for i in range(0, 2 * n, 2)]


def paths(backend):
    LISTED.append(backend)
    return [
        BenchmarkPath("checkpoint floor", checkpoints, resident_baseline=True),
        BenchmarkPath("two checkpoints", two_checkpoints, ("checkpoint floor",)),
    ]


@hookimpl
def pdc_register_backends(register):
    register(Ringed)


@hookimpl
def pdc_register_benchmarks(register):
    register("ringed", paths, "a floor of checkpoints")
"""


@pytest.fixture
def ringed(install_plugins: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    from pdc_core._cli import _bench_paths

    install_plugins("pdc-ringed", {"ringed": "pdc_ringed"}, {"pdc_ringed": RINGED})
    monkeypatch.setitem(_bench_paths.BODIES, "ringed", _bench_paths.double)
    import pdc_ringed  # type: ignore[import-not-found]

    return pdc_ringed


@pytest.mark.parametrize("async_backend", ["asyncio", "trio"])
def test_a_backend_s_own_paths_join_its_resident_ring(
    ringed: Any, async_backend: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A plugin's ``pdc_register_benchmarks`` paths are measured beside the backend's
    resident ring, labelled with the backend; each of its own pdc paths is held against
    its baselines, and pdc's resident paths against those marked ``resident_baseline``."""
    argv = ["bench", "--quick", "--n", "30", "--backend", "ringed", "--async-backend"]
    assert main([*argv, async_backend, "--json"]) == 0
    latency = json.loads(capsys.readouterr().out)["latency"]
    floor = latency[f"{async_backend} / checkpoint floor (ringed)"]
    assert floor["baseline"] is True
    assert floor["n"] == 30
    assert 0 < floor["p50_us"] <= floor["p99_us"]
    mine = latency[f"{async_backend} / two checkpoints (ringed)"]
    assert mine["baseline"] is False
    assert mine["p50_vs_checkpoint floor (ringed)"] > 0
    for path in ("resident ring (ringed)", "resident ring (ringed), spin"):
        entry = latency[f"{async_backend} / {path}"]
        assert entry["p50_vs_checkpoint floor (ringed)"] > 0
        assert entry["p50_vs_ring floor (ringed)"] > 0
        assert "p50_vs_two checkpoints (ringed)" not in entry  # not a resident baseline
    assert all(backend.name == "ringed" for backend in ringed.LISTED)
    assert main(["plugins"]) == 0
    assert "  benchmarks: ringed (pdc bench --backend)" in capsys.readouterr().out
    assert main(["plugins", "--json"]) == 0
    listed = {entry["name"]: entry for entry in json.loads(capsys.readouterr().out)}
    assert listed["ringed"]["benchmarks"] == ["ringed"]
    assert listed["cpu"]["benchmarks"] == []


@pytest.mark.parametrize(
    ("paths", "reason"),
    [
        ("raise RuntimeError('no device here')", "failed to list: RuntimeError: no device here"),
        ("return ['floor']", "'floor' is not a pdc_core.backend.BenchmarkPath"),
        (
            "return [BenchmarkPath('a', checkpoints), BenchmarkPath('a', checkpoints)]",
            "two paths are labelled 'a'",
        ),
        (
            "return [BenchmarkPath('a', checkpoints, ('b',)), BenchmarkPath('b', checkpoints)]",
            "'a' is held against ['b'], which no path listed before it is labelled",
        ),
        ("raise SystemExit(0)", "failed to list: SystemExit: 0 (a plugin must not exit"),
        ("return None", "the listing returned None, not a list of pdc_core.backend.Bench"),
        ("return 'floor'", "the listing returned 'floor', not a list of pdc_core.backend"),
        ("return {'a': 1}", "the listing returned {'a': 1}, not a list of pdc_core.backend"),
        ("return [BenchmarkPath(['a'], checkpoints)]", "labelled ['a']: a label must be"),
        ("return [BenchmarkPath({'a': 1}, checkpoints)]", "labelled {'a': 1}: a label must be"),
        ("return [BenchmarkPath(None, checkpoints)]", "labelled None: a label must be a non"),
        ("return [BenchmarkPath(7, checkpoints)]", "labelled 7: a label must be a non-empty"),
        (
            "return [BenchmarkPath('f', checkpoints), BenchmarkPath('a', checkpoints, 'f')]",
            "'a' has baselines 'f': they must be a tuple of labels (str)",
        ),
        (
            "return [BenchmarkPath('a', checkpoints, ['b'])]",
            "'a' has baselines ['b']: they must be a tuple of labels",
        ),
        (
            "return [BenchmarkPath('a', checkpoints, {'a': 1})]",
            "'a' has baselines {'a': 1}: they must be a tuple of labels",
        ),
        (
            "return [BenchmarkPath('a', checkpoints, None)]",
            "'a' has baselines None: they must be a tuple of labels",
        ),
        (
            "return [BenchmarkPath('a', checkpoints, (None,))]",
            "'a' has baselines (None,): they must be a tuple of labels",
        ),
        (
            "return [BenchmarkPath('a', checkpoints, resident_baseline='yes')]",
            "'a' has resident_baseline 'yes': it must be a bool",
        ),
    ],
)
def test_a_backend_s_paths_that_cannot_run_exit_2_naming_the_plugin(
    install_plugins: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    paths: str,
    reason: str,
) -> None:
    from pdc_core._cli import _bench_paths

    source = RINGED.replace(
        "def paths(backend):\n    LISTED.append(backend)\n", f"def paths(backend):\n    {paths}\n"
    )
    assert source != RINGED
    install_plugins("pdc-ringed", {"ringed": "pdc_ringed"}, {"pdc_ringed": source})
    monkeypatch.setitem(_bench_paths.BODIES, "ringed", _bench_paths.double)
    assert main(["bench", "--quick", "--backend", "ringed"]) == 2
    err = capsys.readouterr().err
    assert (
        "--backend ringed: the benchmark paths of plugin 'ringed' (pdc-ringed) for the "
        "ringed backend" in err
    )
    assert reason in err
    assert "Traceback" not in err


#: Samplers that misbehave when they run, and the error line each one gets.
ASYNC = "async def broken(n, warmup):\n    "
BROKEN_SAMPLERS = [
    (f"{ASYNC}raise RuntimeError('lost')", "its sampler raised RuntimeError: lost"),
    (f"{ASYNC}raise SystemExit(0)", "its sampler raised SystemExit: 0 (a plugin must not"),
    ("broken = 42", "its sampler 42 is not callable"),
    ("def broken(n, warmup):\n    return [1] * n", "instead of an awaitable (it must be async"),
    (f"{ASYNC}return None", "its sampler returned None, not a list of"),
    (f"{ASYNC}return ['a'] * n", "not a list of 30 samples (non-negative ints"),
    (f"{ASYNC}return [-1] * n", "not a list of 30 samples"),
    (f"{ASYNC}return [1.5] * n", "not a list of 30 samples"),
    (f"{ASYNC}return [1] * (n - 1)", "not a list of 30 samples"),
    (f"{ASYNC}return []", "its sampler returned no samples (asked for 30)"),
]


def test_each_sampler_that_fails_is_one_error_line_and_the_rest_is_measured(
    install_plugins: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Plugin samplers that raise, are not callable, are not async or return no or bad
    samples: one error line each naming the plugin and the path, under each event loop;
    every other path is still measured (their dependants say their baseline did not
    run), exit 1. All of them in one run, under asyncio and trio: a failing sampler
    spoils neither the others' error lines nor the paths after it."""
    from pdc_core._cli import _bench_paths

    # Each sampler's ``broken`` is renamed ``broken<i>`` (it appears once in each).
    samplers = "".join(
        sampler.replace("broken", f"broken{i}", 1) + "\n\n\n"
        for i, (sampler, _) in enumerate(BROKEN_SAMPLERS)
    )
    registered = "".join(
        f'        BenchmarkPath("broken {i}", broken{i}),\n'
        f'        BenchmarkPath("after broken {i}", checkpoints, ("broken {i}",)),\n'
        for i in range(len(BROKEN_SAMPLERS))
    )
    two = '        BenchmarkPath("two checkpoints", two_checkpoints, ("checkpoint floor",)),\n'
    source = RINGED.replace(two, two + registered).replace(
        "def paths(backend):", f"{samplers}def paths(backend):"
    )
    install_plugins("pdc-ringed", {"ringed": "pdc_ringed"}, {"pdc_ringed": source})
    monkeypatch.setitem(_bench_paths.BODIES, "ringed", _bench_paths.double)
    argv = ["bench", "--quick", "--n", "30", "--backend", "ringed", "--async-backend", "both"]
    assert main([*argv, "--json"]) == 1
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    errors = [line for line in captured.err.splitlines() if "error" in line]
    payload = json.loads(captured.out)
    libraries = ("asyncio", "trio")
    assert len(errors) == len(libraries) * len(BROKEN_SAMPLERS), captured.err
    assert set(payload["errors"]) == {
        f"{library} / broken {i} (ringed)"
        for library in libraries
        for i in range(len(BROKEN_SAMPLERS))
    }
    latency = payload["latency"]
    for library in libraries:
        for i, (_, reason) in enumerate(BROKEN_SAMPLERS):
            prefix = (
                f"pdc bench: error: the benchmark path 'broken {i}' of plugin 'ringed' "
                "(pdc-ringed): "
            )
            mine = [e for e in errors if e.startswith(prefix) and e.endswith(f"(under {library})")]
            assert len(mine) == 1, (library, i, captured.err)
            assert reason in mine[0]
            assert f"{library} / broken {i} (ringed)" not in latency
            dependant = latency[f"{library} / after broken {i} (ringed)"]
            assert dependant["missing_baselines"] == [f"broken {i} (ringed)"]
        for path in ("checkpoint floor (ringed)", "two checkpoints (ringed)"):
            assert latency[f"{library} / {path}"]["n"] == 30
        assert latency[f"{library} / resident ring (ringed)"]["n"] == 30
        assert payload["throughput"][f"{library} / pdc ask_stream"]["msgs_per_s"] > 0


@pytest.mark.parametrize("async_backend", ["asyncio", "trio"])
def test_a_sampler_may_return_its_samples_as_a_numpy_array(async_backend: str) -> None:
    from pdc_core._cli._bench import _checked_sampler

    async def sampler(n: int, warmup: int) -> Any:
        await anyio.lowlevel.checkpoint()
        return np.arange(n, dtype=np.int64)

    samples = anyio.run(_checked_sampler(sampler, "the path"), 5, 0, backend=async_backend)
    assert samples == [0, 1, 2, 3, 4]
    assert all(type(sample) is int for sample in samples)


@pytest.mark.parametrize("async_backend", ["asyncio", "trio"])
def test_a_third_party_backend_s_own_paths_run_without_pdc_s_resident_rows(
    ringed: Any,
    monkeypatch: pytest.MonkeyPatch,
    async_backend: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Where pdc has no kernel body for a backend, ``--backend`` measures the paths its
    plugin registers and leaves out pdc's resident rows (they need pdc's body)."""
    from pdc_core._cli import _bench_paths

    monkeypatch.delitem(_bench_paths.BODIES, "ringed")
    argv = ["bench", "--quick", "--n", "30", "--backend", "ringed", "--async-backend"]
    assert main([*argv, async_backend, "--json"]) == 0
    latency = json.loads(capsys.readouterr().out)["latency"]
    assert latency[f"{async_backend} / checkpoint floor (ringed)"]["n"] == 30
    assert (
        latency[f"{async_backend} / two checkpoints (ringed)"]["p50_vs_checkpoint floor (ringed)"]
        > 0
    )
    ringed_rows = sorted(key for key in latency if key.endswith("(ringed)"))
    assert ringed_rows == [
        f"{async_backend} / checkpoint floor (ringed)",
        f"{async_backend} / two checkpoints (ringed)",
    ]
    assert ringed.LISTED


def test_a_backend_with_neither_a_body_nor_paths_is_refused(
    install_plugins: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    source = RINGED.replace(
        '    register("ringed", paths, "a floor of checkpoints")\n', "    pass\n"
    )
    install_plugins("pdc-ringed", {"ringed": "pdc_ringed"}, {"pdc_ringed": source})
    assert main(["bench", "--quick", "--backend", "ringed"]) == 2
    assert (
        "--backend ringed: the benchmark has no kernel body for the ringed backend, and its "
        "plugin registers no benchmark paths" in capsys.readouterr().err
    )


class _LaunchingBackend(HostMemoryBackend):
    """Launches "kernels" that are Python functions over byte arrays, synchronously."""

    name: ClassVar[str] = "launching"
    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.KERNELS})

    def __init__(self) -> None:
        super().__init__(0)
        self.launches = 0

    def to_device(self, host: Any, out: Any = None, stream: Any = None) -> Any:
        if out is None:
            return np.array(host)
        out[...] = host
        return out

    def to_host(self, device: Any, out: Any = None, stream: Any = None) -> Any:
        return self.to_device(device, out)

    def compile_kernel(self, source: str, name: str, options: tuple[str, ...] = ()) -> Any:
        assert (source, name) == ("double it", "entry")

        def double(request: Any, reply: Any) -> None:
            reply[:8] = request[:8]
            reply[8:].view(np.float64)[0] = request[8:].view(np.float64)[0] * 2

        return double

    def launch_kernel(self, kernel: Any, grid: Any, block: Any, args: Any, **_: Any) -> None:
        self.launches += 1
        kernel(*args)


@pytest.mark.parametrize("async_backend", ["asyncio", "trio"])
def test_the_launch_per_message_baseline_checks_every_reply(
    async_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``pdc bench --backend cuda``'s launch path, through the backend contract: copy
    in, one launch, copy out, each reply checked (here on a backend whose kernels are
    Python functions; on a GPU the CUDA C kernel of LAUNCH_SOURCES)."""
    from pdc_core._cli import _bench_paths

    backend = _LaunchingBackend()
    monkeypatch.setitem(_bench_paths.LAUNCH_SOURCES, "launching", ("double it", "entry"))
    sampler = _bench_paths.launch_round_trip(backend)
    samples = anyio.run(sampler, 30, 5, backend=async_backend)
    assert len(samples) == 30
    assert backend.launches == 35


@pytest.mark.parametrize("name", ["nope", "cuda"])
def test_a_backend_that_cannot_be_measured_exits_2_saying_why(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from pdc_core._cli._bench import _refuse_backend

    reason = _refuse_backend(name)
    if reason is None:
        pytest.skip(f"the {name} backend runs persistent kernels here")
    assert main(["bench", "--quick", "--backend", name]) == 2
    assert f"--backend {name}: " in capsys.readouterr().err


def test_without_trio_it_says_it_measures_asyncio_only(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "trio", None)  # `import trio` now fails
    assert main(["bench", "--quick", "--n", "60", "--json"]) == 0
    captured = capsys.readouterr()
    assert "trio is not installed (pip install trio): measuring asyncio only" in captured.err
    payload = json.loads(captured.out)
    assert not any(key.startswith("trio") for key in payload["latency"])


def test_only_baselines_are_labelled_baseline() -> None:
    result = BenchResult()
    result.latency_samples = {"asyncio / pdc ask": [5e-6, 6e-6], "asyncio / bare": [2e-5]}
    result.baselines = {"asyncio / pdc ask": ("PyDotCompute 0.2.0",)}  # did not run
    latency = result.payload()["latency"]
    assert latency["asyncio / pdc ask"]["baseline"] is False
    assert latency["asyncio / bare"]["baseline"] is True
    # Every n/a says which baseline did not run and how to get it.
    assert latency["asyncio / pdc ask"]["missing_baselines"] == ["PyDotCompute 0.2.0"]
    assert _no_ratio(latency["asyncio / pdc ask"]) == (
        "n/a: PyDotCompute 0.2.0 did not run (pip install pydotcompute==0.2.0)"
    )
    assert _no_ratio(latency["asyncio / bare"]) == "(baseline)"


def test_tables_read_at_80_columns_with_each_missing_baseline_named_once() -> None:
    """One latency and one throughput table per loop: every line fits 80 columns, the
    header of every ratio column says which way is better, and a baseline that did not
    run is a footnote mark in its rows, named once under the tables with how to get it."""
    from rich.console import Console

    from pdc_core._cli._bench import _table

    result = _measured()
    payload = result.payload()
    console = Console(width=80, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    _table(payload, console)
    console.file.close()
    text = console.export_text()
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    for loop in ("asyncio", "trio"):
        assert f"Round-trip latency on {loop} (us; lower is better)" in text
        assert f"Throughput into one actor on {loop} (higher is better)" in text
    assert text.count("lower is better") == 4  # titles and ratio headers
    assert text.count("higher is better") == 4
    assert text.count("PyDotCompute 0.2.0 streaming did not run") == 1
    assert lines[-1] == (
        "[1] PyDotCompute 0.2.0 streaming did not run: pip install pydotcompute==0.2.0"
    )
    tell_many = [line for line in lines if "pdc tell_many -> handle_batch" in line]
    assert len(tell_many) == 2
    assert all("n/a [1]" in line for line in tell_many)
    assert re.search(r"│ 0\.[12]\d*x bare anyio streams", text)  # pdc ask over its baseline


def test_table_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--quick", "--n", "60", "--async-backend", "trio"]) == 0
    out = capsys.readouterr().out
    assert "Round-trip latency on trio" in out
    assert "pdc ask" in out
    assert "msgs/s" in out


def test_plot_without_matplotlib_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["bench", "--quick", "--plot", str(tmp_path / "x.png")]) == 2
    assert "pip install 'pdc-core[plot]'" in capsys.readouterr().err


def test_plot_writes_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    target = tmp_path / "latency.png"
    assert (
        main(["bench", "--quick", "--n", "60", "--async-backend", "asyncio", "--plot", str(target)])
        == 0
    )
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _measured() -> BenchResult:
    """A result as the suite leaves it, without measuring: two loops, both panels."""
    rng = np.random.default_rng(0)
    result = BenchResult()
    for backend, scale in (("asyncio", 1.0), ("trio", 1.5)):
        for label, p50_ns, baselines in (
            ("bare anyio streams", 25_000, ()),
            ("pdc ask", 5_000, ("bare anyio streams",)),
            ("persistent kernel (cpu)", 50_000, ("a task per message (cpu)",)),
            ("a task per message (cpu)", 18_000, ()),
        ):
            key = f"{backend} / {label}"
            result.latency_samples[key] = list(
                (rng.lognormal(0, 0.2, 200) * p50_ns * scale).astype(int)
            )
            result.baselines[key] = baselines
        for label, rate, baselines in (
            ("pdc tell_many -> handle_batch", 4e6, ("PyDotCompute 0.2.0 streaming",)),
            ("a task per message (cpu), all in flight", 6e4, ()),
            (
                "persistent kernel (cpu), request_batch",
                3e6,
                ("a task per message (cpu), all in flight",),
            ),
        ):
            key = f"{backend} / {label}"
            result.throughput[key] = [rate * scale, rate * scale * 1.1]
            result.baselines[key] = baselines
    return result


def test_plot_has_a_throughput_panel_a_legend_and_a_colour_per_path() -> None:
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from pdc_core._cli._bench import figure

    fig = figure(_measured())
    try:
        axes = fig.get_axes()
        titles = [ax.get_title() for ax in axes]
        assert titles == [
            "asyncio: round-trip latency (lower is better)",
            "asyncio: throughput into one actor (higher is better)",
            "trio: round-trip latency (lower is better)",
            "trio: throughput into one actor (higher is better)",
        ]
        latency_asyncio, throughput_asyncio, latency_trio, throughput_trio = axes
        # One scale per comparison: the loops share the latency and the throughput scales.
        assert latency_asyncio.get_ylim() == latency_trio.get_ylim()
        assert throughput_asyncio.get_xlim() == throughput_trio.get_xlim()
        assert throughput_asyncio.get_xscale() == "log"
        # The latency axis is log10(us), labelled in us (a decade per major tick).
        labels = {tick.get_text() for tick in latency_asyncio.get_yticklabels()}
        assert {"1", "10", "100"} <= labels
        bars = [tick.get_text() for tick in throughput_asyncio.get_yticklabels()]
        assert bars == [
            "pdc tell_many -> handle_batch",
            "a task per message (cpu), all in flight",
            "persistent kernel (cpu), request_batch",
        ]
        (legend,) = fig.legends
        entries = {
            text.get_text(): handle
            for text, handle in zip(legend.get_texts(), legend.legend_handles, strict=True)
        }
        assert set(entries) == {
            "pdc ask",
            "persistent kernel (cpu)",
            "pdc tell_many -> handle_batch",
            "bare anyio streams (baseline)",
            "a task per message (cpu) (baseline)",
            "median",
            "p99",
        }
        paths = [entry for name, entry in entries.items() if name not in {"median", "p99"}]
        colours = [tuple(entry.get_facecolor()) for entry in paths]
        assert len(set(colours)) == len(colours), "two paths share a colour"
        # Baselines, and only they, are hatched.
        for name, entry in entries.items():
            if name not in {"median", "p99"}:
                assert bool(entry.get_hatch()) == name.endswith("(baseline)"), name
        # A throughput variant wears the colour of the path it varies.
        patches = throughput_asyncio.patches
        assert tuple(patches[2].get_facecolor()) == tuple(
            entries["persistent kernel (cpu)"].get_facecolor()
        )
    finally:
        plt.close(fig)


def _drawn_mass(body: Any) -> tuple[float, Any, Any]:
    """A violin's outline as (centre x, y, half-width at y), from its drawn polygon."""
    vertices = body.get_paths()[0].vertices
    centre = float(np.mean(vertices[:, 0]))
    right = vertices[vertices[:, 0] >= centre]
    order = np.argsort(right[:, 1])
    return centre, right[order, 1], right[order, 0] - centre


def test_plot_draws_each_violin_where_its_samples_are() -> None:
    """Samples at ~10 us with 0.5% at ~3 ms (a median of 10 us, a p99 of ~12 us):
    the violin's widest point is at the median and almost none of its area lies above
    the p99 marker. (A density estimated on linear us and drawn on a log axis put the
    mass at hundreds of us.)"""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from pdc_core._cli._bench import figure

    rng = np.random.default_rng(1)
    bulk = rng.lognormal(np.log(10_000), 0.08, 9950)
    outliers = rng.uniform(1e6, 5e6, 50)
    samples = np.concatenate([bulk, outliers]).astype(int)
    p50, p99 = np.percentile(samples / 1e3, [50, 99])
    result = BenchResult()
    result.latency_samples["asyncio / pdc ask"] = list(samples)
    result.baselines["asyncio / pdc ask"] = ()
    fig = figure(result)
    try:
        latency = fig.get_axes()[0]
        (body,) = latency.collections[:1]
        _, ys, widths = _drawn_mass(body)
        assert abs(ys[np.argmax(widths)] - np.log10(p50)) < 0.1  # widest at the median
        area = np.trapezoid(widths, ys)
        above = ys > np.log10(p99)
        share = np.trapezoid(widths[above], ys[above]) / area
        assert share < 0.05, f"{share:.0%} of the violin is drawn above p99"
        median, high = (c.get_offsets()[0][1] for c in latency.collections[1:3])
        assert abs(median - np.log10(p50)) < 1e-9
        assert abs(high - np.log10(p99)) < 1e-9
        assert latency.get_ylim()[1] > np.log10(5_000)  # the outliers are on the axis
    finally:
        plt.close(fig)


def test_plot_gives_every_path_a_colour_of_its_own_when_a_backend_adds_many() -> None:
    """``--backend`` adds a dozen paths and more per loop: past the palettes, every path
    and every baseline still gets a colour no other has, and the latency panel widens."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from pdc_core._cli._bench import figure

    result = _measured()
    samples = result.latency_samples["asyncio / pdc ask"]
    for i in range(12):
        for label, baselines in ((f"floor {i}", ()), (f"path {i}", (f"floor {i}",))):
            result.latency_samples[f"asyncio / {label}"] = samples
            result.baselines[f"asyncio / {label}"] = baselines
    fig = figure(result)
    try:
        (legend,) = fig.legends
        colours = [
            tuple(handle.get_facecolor())
            for text, handle in zip(legend.get_texts(), legend.legend_handles, strict=True)
            if text.get_text() not in {"median", "p99"}
        ]
        assert len(colours) == 2 * 12 + 5
        assert len(set(colours)) == len(colours), "two paths share a colour"
        assert fig.get_figwidth() > 16
    finally:
        plt.close(fig)


def test_pdc_paths_are_not_baselines_without_pydotcompute(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pdc_core._cli import _bench

    monkeypatch.setattr(_bench.paths, "pydotcompute_round_trip", lambda: None)
    monkeypatch.setattr(_bench.paths, "pydotcompute_streaming", lambda: None)
    for path in [*_bench.latency_paths(), *_bench.throughput_paths()]:
        if path.label.startswith("pdc"):
            assert path.baselines, f"{path.key} would be labelled a baseline"


def test_interrupt_keeps_partial_results() -> None:
    result = BenchResult()
    calls = 0

    def on_step(key: str) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_suite(
            result,
            n=50,
            rounds=1,
            warmup=5,
            throughput_n=100,
            async_backends=("asyncio",),
            on_step=on_step,
        )
    measured = [key for key, samples in result.latency_samples.items() if samples]
    assert len(measured) == 2
    assert result.payload()["latency"]


@pytest.mark.parametrize("argv", [["--async-backend", "curio"], ["--rounds", "0"], ["--bogus"]])
def test_bad_options_exit_2(argv: list[str]) -> None:
    try:
        status = main(["bench", *argv])
    except SystemExit as exit_:
        status = exit_.code  # type: ignore[assignment]
    assert status == 2


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process")
@pytest.mark.parametrize("async_backend", ["asyncio", "trio"])
def test_ctrl_c_prints_partial_results(async_backend: str) -> None:
    proc = start_interruptible(
        ["bench", "--json", "--rounds", "50", "--async-backend", async_backend]
    )
    # once a first measurement is in, so there are partial results to print
    out, err = interrupt_once_running(proc, "pdc bench: running", within=120, exit_within=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    payload = json.loads(out)
    assert payload["interrupted"] is True
    assert payload["latency"]


@pytest.mark.parametrize("library", ["asyncio", "trio"])
def test_ctrl_c_ends_a_run_even_when_the_code_under_measurement_swallows_a_cancel(
    library: str,
) -> None:
    from pdc_core._cli._bench_paths import run_fresh

    swallowed: list[bool] = []

    async def stubborn() -> None:
        signal.raise_signal(signal.SIGINT)  # handled by run_fresh's receiver
        try:
            await anyio.sleep(10)
        except anyio.get_cancelled_exc_class():
            swallowed.append(True)  # a badly behaved baseline: it carries on
        await anyio.sleep(10)  # cancelled again: the scope stays cancelled

    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        run_fresh(library, stubborn)
    assert swallowed == [True]
    assert time.monotonic() - started < 5
