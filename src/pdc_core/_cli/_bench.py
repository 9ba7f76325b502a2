"""``pdc bench``: the latency and throughput suite behind one command.

Every *path* is measured side by side with its *baselines* in the same run, under
asyncio and trio, so the ratios mean something on any machine:

Latency (one request, one reply; samples in nanoseconds, pooled over rounds):

* ``bare anyio streams`` -- baseline: two memory-object streams, ``await send`` then
  ``await receive``, a server task echoing.
* ``pdc ask`` -- ``await ref.ask(msg)`` on a mailbox actor echoing its message.
* ``pdc seed facade`` -- ``runtime.send`` + ``runtime.receive`` on a ring kernel.
* ``PyDotCompute 0.2.0`` -- baseline, the same two calls on its runtime (asyncio only,
  when ``pydotcompute`` is installed).

* ``persistent kernel (cpu)`` -- ``session.request(record)`` on a persistent kernel
  of the cpu backend, against ``a task per message (cpu)`` -- the same work dispatched
  as a new task per message.

Throughput (messages per second into one actor, replies checked):

* ``pdc tell_many -> handle_batch`` -- batched sends into a batch-handling actor.
* ``pdc ask_many -> handle_batch`` -- batched requests, replies back.
* ``pdc ask_stream`` -- windowed request/reply.
* ``pdc seed facade streaming`` and, as baseline, ``PyDotCompute 0.2.0 streaming``:
  a producer task sends everything while the caller receives everything.
* ``persistent kernel (cpu), request_batch`` against ``a task per ring-full (cpu), all
  in flight``: the same batches (one ring-full each), dispatched as one task each --
  like for like, where a task per message would compare batching with spawning.

The paths themselves live in :mod:`pdc_core._cli._bench_paths`, shared with the scripts of
``benchmarks/`` (one implementation of each); :func:`run_suite` runs them all.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

import anyio
import numpy as np

from .._exceptions import PluginError
from .._plugins import BenchmarkPath
from ..backend import Backend, Capability
from . import _bench_paths as paths
from ._bench_stats import environment
from ._bench_stats import summarize as _summary
from ._options import error
from ._running import announce_once, only_interrupts

__all__ = [
    "BARE",
    "BASELINE_INSTALL",
    "PERSISTENT",
    "PER_RING_BATCHED",
    "PLOT_HINT",
    "PYDOTCOMPUTE",
    "PYDOTCOMPUTE_STREAMING",
    "BenchResult",
    "LatencyPath",
    "ThroughputPath",
    "add_arguments",
    "backend_benchmarks",
    "figure",
    "latency_paths",
    "plot",
    "resident_paths",
    "ring_floor",
    "run",
    "run_suite",
    "steps",
    "summarize",
    "throughput_paths",
]

BARE: Final = "bare anyio streams"
PYDOTCOMPUTE: Final = "PyDotCompute 0.2.0"
PERSISTENT: Final = "persistent kernel (cpu)"
PER_MESSAGE: Final = "a task per message (cpu)"
PYDOTCOMPUTE_STREAMING: Final = f"{PYDOTCOMPUTE} streaming"
PER_RING_BATCHED: Final = "a task per ring-full (cpu), all in flight"


@dataclass(frozen=True)
class LatencyPath:
    """A measured path: ``label`` on ``async_backend``, compared with ``baselines``.
    A ``plugin`` path's :class:`~pdc_core.PluginError` fails that path alone."""

    async_backend: str
    label: str
    sampler: paths.LatencySampler
    baselines: tuple[str, ...] = ()
    plugin: bool = False

    @property
    def key(self) -> str:
        return f"{self.async_backend} / {self.label}"


@dataclass(frozen=True)
class ThroughputPath:
    """A throughput path: ``label`` on ``async_backend``, compared with ``baselines``."""

    async_backend: str
    label: str
    runner: paths.ThroughputRunner
    baselines: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.async_backend} / {self.label}"


def _has_cpu_kernels() -> bool:
    from .._plugins import available_backends

    return any(
        info.name == "cpu"
        and info.availability.available
        and Capability.PERSISTENT_KERNELS in info.capabilities
        for info in available_backends()
    )


def ring_floor(backend: str) -> str:
    """The label of ``backend``'s ring floor (see :func:`_bench_paths.ring_floor_round_trip`)."""
    return f"ring floor ({backend})"


def _launches(backend: Backend | str) -> bool:
    """Whether ``backend`` launches kernels and the bench has a launch kernel for it."""
    from .._plugins import resolve_backend

    return paths.backend_kind(backend) in paths.LAUNCH_SOURCES and resolve_backend(backend).has(
        Capability.KERNELS
    )


def _resident(backend: Backend | str) -> bool:
    """Whether pdc measures ``backend``'s resident ring: it runs persistent kernels and
    the benchmark has a kernel body for it."""
    from .._plugins import resolve_backend

    return paths.backend_kind(backend) in paths.BODIES and resolve_backend(backend).has(
        Capability.PERSISTENT_KERNELS
    )


def _path_problem(path: BenchmarkPath, labels: set[str]) -> str | None:
    """What is wrong with one listed path (its sampler is checked when it runs)."""
    if not isinstance(path.label, str) or not path.label.strip():
        return f"a path is labelled {path.label!r}: a label must be a non-empty str"
    if path.label in labels:
        return f"two paths are labelled {path.label!r}"
    if not isinstance(path.baselines, tuple) or not all(
        isinstance(name, str) for name in path.baselines
    ):
        return (
            f"{path.label!r} has baselines {path.baselines!r}: they must be a tuple of "
            "labels (str), such as ('floor',)"
        )
    unknown = [name for name in path.baselines if name not in labels]
    if unknown:
        return (
            f"{path.label!r} is held against {unknown!r}, which no path listed before it "
            "is labelled"
        )
    if not isinstance(path.resident_baseline, bool):
        return f"{path.label!r} has resident_baseline {path.resident_baseline!r}: it must be a bool"
    return None


def backend_benchmarks(backend: Backend | str) -> list[BenchmarkPath]:
    """The paths ``backend``'s plugin adds to ``pdc bench --backend`` (its
    ``pdc_register_benchmarks`` hook), checked: :class:`~pdc_core.PluginError` naming
    the plugin and the problem when listing them raised (``SystemExit`` included), gave
    something other than an iterable of :class:`~pdc_core.backend.BenchmarkPath`
    objects, or gave paths whose labels are not distinct non-empty strs, whose
    ``baselines`` are not a tuple of labels listed before them or whose
    ``resident_baseline`` is not a bool. Each path's sampler is wrapped so that what it
    does wrong when it runs is a ``PluginError`` naming the plugin and the path."""
    from .._plugins import registered_benchmarks, resolve_backend

    registration = registered_benchmarks().get(paths.backend_kind(backend))
    if registration is None:
        return []
    plugin = f"plugin {registration.plugin.name!r} ({registration.plugin.distribution})"
    origin = f"the benchmark paths of {plugin} for the {registration.name} backend"
    try:
        listed = registration.target(resolve_backend(backend))
        if isinstance(listed, (str, bytes, Mapping)) or not isinstance(listed, Iterable):
            raise PluginError(
                f"{origin}: the listing returned {listed!r}, not a list of "
                "pdc_core.backend.BenchmarkPath objects"
            )
        found = list(listed)
    except (KeyboardInterrupt, PluginError):
        raise
    except BaseException as exc:  # SystemExit too: a plugin must not end pdc bench
        raise PluginError(f"{origin} failed to list: {_one_line(exc)}") from exc
    labels: set[str] = set()
    checked = []
    for path in found:
        if not isinstance(path, BenchmarkPath):
            raise PluginError(f"{origin}: {path!r} is not a pdc_core.backend.BenchmarkPath")
        problem = _path_problem(path, labels)
        if problem is not None:
            raise PluginError(f"{origin}: {problem}")
        labels.add(path.label)
        what = f"the benchmark path {path.label!r} of {plugin}"
        checked.append(replace(path, sampler=_checked_sampler(path.sampler, what)))
    return checked


def _one_line(exc: BaseException) -> str:
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    if isinstance(exc, SystemExit):
        text += " (a plugin must not exit the process)"
    return text


def _checked_sampler(sampler: Any, what: str) -> paths.LatencySampler:
    """``sampler`` as pdc runs it: anything it does wrong (it is not callable, not
    async, raises, returns something other than ``n`` int samples) is a
    :class:`~pdc_core.PluginError` naming ``what``. Cancellation and Ctrl-C pass."""

    async def sample(n: int, warmup: int) -> list[int]:
        if not callable(sampler):
            raise PluginError(f"{what}: its sampler {sampler!r} is not callable")
        try:
            pending = sampler(n, warmup)
            if not inspect.isawaitable(pending):
                raise PluginError(
                    f"{what}: its sampler returned {pending!r} instead of an awaitable "
                    "(it must be async: an async def function)"
                )
            got = await pending
        except (KeyboardInterrupt, PluginError, anyio.get_cancelled_exc_class()):
            raise
        except BaseException as exc:  # SystemExit too: one path must not end pdc bench
            raise PluginError(f"{what}: its sampler raised {_one_line(exc)}") from exc
        if isinstance(got, np.ndarray) and got.ndim == 1:
            got = got.tolist()  # NumPy ints become Python ints; floats stay floats (refused)
        if isinstance(got, (list, tuple)) and not got:
            raise PluginError(f"{what}: its sampler returned no samples (asked for {n})")
        if not (
            isinstance(got, (list, tuple))
            and len(got) == n
            and all(
                isinstance(x, (int, np.integer)) and not isinstance(x, bool) and x >= 0 for x in got
            )
        ):
            shown = repr(got)
            shown = shown if len(shown) <= 80 else shown[:77] + "..."
            raise PluginError(
                f"{what}: its sampler returned {shown}, not a list of {n} samples "
                "(non-negative ints, in nanoseconds)"
            )
        return [int(x) for x in got]

    return sample


def resident_paths(async_backend: str, backend: Backend | str) -> list[LatencyPath]:
    """``pdc bench --backend NAME``: the resident ring of ``backend`` (a session's
    request, awaiting and spinning, and a kernel actor's ask) against its floor and,
    where the backend launches kernels, a launch per message; then the paths the
    backend's plugin adds (:func:`backend_benchmarks`), labelled ``"<label> (NAME)"``,
    those marked ``resident_baseline`` among the resident paths' baselines. Where pdc
    has no kernel body for the backend (a third-party one), only the plugin's paths."""
    name = paths.backend_name(backend)
    resident = _resident(backend)
    out = []
    baselines: tuple[str, ...] = ()
    if resident:
        floor = ring_floor(name)
        out.append(LatencyPath(async_backend, floor, paths.ring_floor_round_trip(backend)))
        baselines = (floor,)
        if _launches(backend):
            launch = f"launch per message ({name})"
            out.append(LatencyPath(async_backend, launch, paths.launch_round_trip(backend)))
            baselines = (floor, launch)
    for path in backend_benchmarks(backend):
        label = f"{path.label} ({name})"
        theirs = tuple(f"{baseline} ({name})" for baseline in path.baselines)
        out.append(LatencyPath(async_backend, label, path.sampler, theirs, plugin=True))
        if path.resident_baseline:
            baselines += (label,)
    if not resident:
        return out
    return [
        *out,
        LatencyPath(
            async_backend, f"resident ring ({name})", paths.persistent_round_trip(backend),
            baselines,
        ),
        LatencyPath(
            async_backend, f"resident ring ({name}), spin",
            paths.persistent_round_trip(backend, wait="spin"), baselines,
        ),
        LatencyPath(
            async_backend, f"resident actor ask ({name})",
            paths.persistent_actor_round_trip(backend), baselines,
        ),
    ]  # fmt: skip


def latency_paths(
    async_backends: tuple[str, ...] = ("asyncio", "trio"), backend: Backend | str | None = None
) -> list[LatencyPath]:
    """Every latency path that can run here (PyDotCompute only if installed), and with
    ``backend`` that backend's resident ring (:func:`resident_paths`)."""
    theirs = paths.pydotcompute_round_trip()
    kernels = _has_cpu_kernels()
    out: list[LatencyPath] = []
    for library in async_backends:
        if backend is not None:
            out += resident_paths(library, backend)
    for library in async_backends:
        baselines = (BARE, PYDOTCOMPUTE) if theirs is not None else (BARE,)
        out += [
            LatencyPath(library, BARE, paths.bare_streams),
            LatencyPath(library, "pdc ask", paths.pdc_ask, baselines),
            LatencyPath(library, "pdc seed facade", paths.facade_round_trip(), baselines),
        ]
        if kernels:
            out += [
                LatencyPath(library, PER_MESSAGE, paths.task_per_message_round_trip),
                LatencyPath(library, PERSISTENT, paths.persistent_round_trip(), (PER_MESSAGE,)),
            ]
    if theirs is not None and "asyncio" in async_backends:
        out.append(LatencyPath("asyncio", PYDOTCOMPUTE, theirs))
    return out


def throughput_paths(async_backends: tuple[str, ...] = ("asyncio", "trio")) -> list[ThroughputPath]:
    """Every throughput path that can run here (PyDotCompute only if installed)."""
    theirs = paths.pydotcompute_streaming()
    kernels = _has_cpu_kernels()
    # Declared whether or not PyDotCompute is installed: these are pdc's own paths, never
    # baselines (without PyDotCompute their rows say that their baselines did not run).
    baselines = (PYDOTCOMPUTE_STREAMING,)
    out: list[ThroughputPath] = []
    for backend in async_backends:
        out += [
            ThroughputPath(backend, "pdc tell_many -> handle_batch", paths.tell_many, baselines),
            ThroughputPath(
                backend, "pdc ask_many -> handle_batch", paths.ask_many(batched=True), baselines
            ),
            ThroughputPath(backend, "pdc ask_stream", paths.ask_stream, baselines),
            ThroughputPath(
                backend, "pdc seed facade streaming", paths.facade_streaming(), baselines
            ),
        ]
        if kernels:
            out += [
                ThroughputPath(backend, PER_RING_BATCHED, paths.task_per_ring_batched),
                ThroughputPath(
                    backend,
                    f"{PERSISTENT}, request_batch",
                    paths.persistent_batched(),
                    (PER_RING_BATCHED,),
                ),
            ]
    if theirs is not None and "asyncio" in async_backends:
        out.append(ThroughputPath("asyncio", PYDOTCOMPUTE_STREAMING, theirs))
    return out


# -- the suite --------------------------------------------------------------------------------


def summarize(samples_ns: list[int]) -> dict[str, float]:
    """Percentiles (microseconds) of latency samples in nanoseconds."""
    s = _summary(samples_ns).scaled(1e-3)
    return {
        "n": float(s.count),
        "mean_us": s.mean,
        "p50_us": s.p50,
        "p90_us": s.p90,
        "p99_us": s.p99,
        "min_us": s.minimum,
        "max_us": s.maximum,
    }


def _baseline(table: dict[str, Any], key: str, baseline: str) -> Any:
    """The baseline's entry on the same event loop, else on asyncio (PyDotCompute)."""
    backend = key.split(" / ", 1)[0]
    return table.get(f"{backend} / {baseline}") or table.get(f"asyncio / {baseline}")


@dataclass
class BenchResult:
    """Everything measured; partial (``interrupted``) after Ctrl-C."""

    latency_samples: dict[str, list[int]] = field(default_factory=dict)
    baselines: dict[str, tuple[str, ...]] = field(default_factory=dict)
    throughput: dict[str, list[float]] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    interrupted: bool = False
    #: Paths that failed (a plugin's sampler), by key: one line each, saying why.
    errors: dict[str, str] = field(default_factory=dict)

    def payload(self) -> dict[str, Any]:
        latency: dict[str, Any] = {}
        for key, samples in self.latency_samples.items():
            if not samples:
                continue
            entry: dict[str, Any] = summarize(samples)
            entry["baseline"] = not self.baselines.get(key)  # a path has baselines; they none
            for baseline in self.baselines.get(key, ()):
                ref = _baseline(self.latency_samples, key, baseline)
                if ref:
                    entry[f"p50_vs_{baseline}"] = entry["p50_us"] / summarize(ref)["p50_us"]
                else:
                    entry.setdefault("missing_baselines", []).append(baseline)
            latency[key] = entry
        throughput: dict[str, Any] = {}
        for key, values in self.throughput.items():
            if not values:
                continue
            rate = float(np.median(values))
            entry = {"msgs_per_s": rate, "rounds": len(values)}
            entry["baseline"] = not self.baselines.get(key)
            for baseline in self.baselines.get(key, ()):
                ref = _baseline(self.throughput, key, baseline)
                if ref:
                    entry[f"x_vs_{baseline}"] = rate / float(np.median(ref))
                else:
                    entry.setdefault("missing_baselines", []).append(baseline)
            throughput[key] = entry
        return {
            "environment": environment(["pdc-core", "anyio", "trio", "numpy", "pydotcompute"]),
            "settings": self.settings,
            "latency": latency,
            "throughput": throughput,
            "errors": dict(self.errors),
            "interrupted": self.interrupted,
        }


def run_suite(
    result: BenchResult,
    *,
    n: int,
    rounds: int,
    warmup: int,
    throughput_n: int,
    async_backends: tuple[str, ...] = ("asyncio", "trio"),
    on_step: Callable[[str], None] | None = None,
    backend: Backend | str | None = None,
) -> BenchResult:
    """Run every path ``rounds`` times (rotating order, fresh event loop each time).

    Results accumulate into ``result`` as they come, so a ``KeyboardInterrupt``
    leaves everything measured so far in it. A plugin's path that fails is recorded in
    ``result.errors`` (its samples dropped) and not run again; the others still run.
    """
    lat = latency_paths(async_backends, backend)
    thr = throughput_paths(async_backends)
    result.settings = {
        "n": n,
        "rounds": rounds,
        "warmup": warmup,
        "throughput_n": throughput_n,
        "async_backends": list(async_backends),
        "backend": backend if backend is None or isinstance(backend, str) else repr(backend),
    }
    for path in lat:
        result.latency_samples.setdefault(path.key, [])
        result.baselines[path.key] = path.baselines
    for tpath in thr:
        result.throughput.setdefault(tpath.key, [])
        result.baselines[tpath.key] = tpath.baselines
    for round_index in range(rounds):
        for path in paths.rotated(lat, round_index):
            if path.key not in result.errors:
                try:
                    samples = paths.run_fresh(path.async_backend, path.sampler, n, warmup)
                except PluginError as exc:
                    if not path.plugin:
                        raise
                    result.errors[path.key] = f"{exc} (under {path.async_backend})"
                    result.latency_samples[path.key] = []
                else:
                    result.latency_samples[path.key] += samples
            if on_step:
                on_step(path.key)
        for tpath in paths.rotated(thr, round_index):
            rate = paths.run_fresh(tpath.async_backend, tpath.runner, throughput_n)
            result.throughput[tpath.key].append(rate)
            if on_step:
                on_step(tpath.key)
    return result


def steps(
    rounds: int, async_backends: tuple[str, ...], backend: Backend | str | None = None
) -> int:
    """How many steps :func:`run_suite` reports through ``on_step``."""
    return rounds * (
        len(latency_paths(async_backends, backend)) + len(throughput_paths(async_backends))
    )


# -- the plot ---------------------------------------------------------------------------------


PLOT_HINT: Final = "--plot needs matplotlib: pip install 'pdc-core[plot]'"


#: The colours of pdc's paths, then of the baselines (muted, and hatched in the plot).
_PDC_COLOURS: Final = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#e377c2", "#17becf")
_BASELINE_COLOURS: Final = ("#7f7f7f", "#8c564b", "#bcbd22", "#c49c94", "#c7c7c7")
#: Suffixes that name a throughput variant of a latency path (it keeps that path's colour).
_VARIANTS: Final = (" streaming", ", request_batch", ", all in flight")


def _family(label: str) -> str:
    """The path a label measures: its throughput variants share one colour with it."""
    for suffix in _VARIANTS:
        label = label.removesuffix(suffix)
    return label


def _panel_entries(table: dict[str, Any], backend: str) -> list[tuple[str, str, Any]]:
    """``(key, label shown, values)`` of one event loop's panel, in the suite's order.

    PyDotCompute runs under asyncio only; it stands beside the other loop's paths too
    (labelled so), as it is what their ratios are taken against.
    """
    out = []
    for key, values in table.items():
        owner, label = key.split(" / ", 1)
        if not values:
            continue
        if owner == backend:
            out.append((key, label, values))
        elif label.startswith(PYDOTCOMPUTE):
            out.append((key, f"{label} ({owner})", values))
    return out


def _rate(value: float) -> str:
    for scale, unit in ((1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.3g} {unit}/s"
    return f"{value:.3g} /s"


def plot(result: BenchResult, path: str) -> None:
    """Draw :func:`figure` of ``result`` into the file ``path`` (PNG, or what its suffix says)."""
    fig = figure(result)  # selects matplotlib's Agg backend before pyplot is imported
    import matplotlib.pyplot as plt

    try:
        fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)


def figure(result: BenchResult) -> Any:
    """One row per event loop: latency distributions beside throughput, with a legend.

    Left, each path's round-trip latency as a violin (log scale: the density is of
    log10 of the samples, so its shape sits where the samples are; median and p99
    marked);
    right, each path's throughput (median msgs/s over rounds, log scale). Every path has
    a colour of its own, the same in both panels and rows (a throughput variant takes
    the colour of the path it varies); baselines are muted and hatched, and the legend
    says which are baselines. The rows share their scales, so asyncio and trio compare.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    tables = (result.latency_samples, result.throughput)
    backends = sorted({key.split(" / ", 1)[0] for table in tables for key in table})
    baseline_of = {
        _family(key.split(" / ", 1)[1]): not result.baselines.get(key)
        for table in tables
        for key, values in table.items()
        if values
    }
    pdc_families = [family for family, is_baseline in baseline_of.items() if not is_baseline]
    baseline_families = [family for family, is_baseline in baseline_of.items() if is_baseline]
    if len(pdc_families) <= len(_PDC_COLOURS) and len(baseline_families) <= len(_BASELINE_COLOURS):
        colours = [*_PDC_COLOURS[: len(pdc_families)], *_BASELINE_COLOURS]
    else:  # more paths than the palettes (--backend): one distinct colour each
        colours = _distinct(len(pdc_families) + len(baseline_families))
    colour = dict(zip([*pdc_families, *baseline_families], colours, strict=False))

    def style(label: str) -> dict[str, Any]:
        family = _family(label.removesuffix(" (asyncio)"))
        hatched = baseline_of.get(family, False)
        return {
            "facecolor": colour.get(family, "#000000"),
            "edgecolor": "#333333",
            "hatch": "///" if hatched else None,
        }

    rows = max(1, len(backends))
    # Room for every violin: ``pdc bench --backend`` adds a dozen or more paths per loop.
    most = max((len(_panel_entries(result.latency_samples, b)) for b in backends), default=0)
    wide = max(0.0, 0.45 * (most - 12))
    fig, axes = plt.subplots(
        rows,
        2,
        figsize=(16 + wide, 4.8 * rows + 1.0),
        squeeze=False,
        gridspec_kw={"width_ratios": [1.25 + wide / 7, 1]},
    )
    # One scale per comparison: every latency panel gets the same limits, and every
    # throughput panel (each lists its own paths, so no axis is shared outright).
    latency_values = [v for v in result.latency_samples.values() if v]
    throughput_values = [np.median(v) for v in result.throughput.values() if v]
    for row, backend in enumerate(backends):
        lat_ax, thr_ax = axes[row]
        entries = _panel_entries(result.latency_samples, backend)
        if entries:
            # The density is estimated on log10(us), the axis it is drawn on: estimated
            # on linear us, a few millisecond outliers set a bandwidth so wide that the
            # shape lands decades away from where the samples are.
            us = [_us(values) for _, _, values in entries]
            data = [np.log10(u) for u in us]
            positions = list(range(1, len(data) + 1))
            parts = lat_ax.violinplot(data, positions, showextrema=False, widths=0.8)
            for body, (_, label, _) in zip(parts["bodies"], entries, strict=True):
                st = style(label)
                body.set_facecolor(st["facecolor"])
                body.set_edgecolor(st["edgecolor"])
                body.set_hatch(st["hatch"])
                body.set_alpha(0.75)
            lat_ax.scatter(
                positions,
                [np.log10(np.median(u)) for u in us],
                marker="_",
                s=500,
                c="black",
                zorder=3,
            )
            lat_ax.scatter(
                positions,
                [np.log10(np.percentile(u, 99)) for u in us],
                marker="v",
                s=40,
                c="black",
                zorder=3,
            )
            lat_ax.set_xticks(positions, [label for _, label, _ in entries])
            lat_ax.tick_params(axis="x", labelrotation=25)
            for tick in lat_ax.get_xticklabels():
                tick.set_horizontalalignment("right")
        _log_ticks(lat_ax)
        lat_ax.set_ylabel("round trip, us (log scale)")
        lat_ax.set_title(f"{backend}: round-trip latency (lower is better)")
        lat_ax.grid(axis="y", which="major", alpha=0.3)

        rates = [
            (label, float(np.median(values)))
            for _, label, values in _panel_entries(result.throughput, backend)
        ]
        if rates:
            ys = list(range(len(rates)))
            for y, (label, rate) in zip(ys, rates, strict=True):
                thr_ax.barh(y, rate, height=0.7, **style(label))
                thr_ax.text(rate, y, f" {_rate(rate)}", va="center", fontsize=8)
            thr_ax.set_yticks(ys, [label for label, _ in rates], fontsize=8)
            thr_ax.invert_yaxis()
        thr_ax.set_xscale("log")
        if throughput_values:
            thr_ax.set_xlim(min(throughput_values) / 3, max(throughput_values) * 8)
        thr_ax.set_xlabel("messages per second, median over rounds (log scale)")
        thr_ax.set_title(f"{backend}: throughput into one actor (higher is better)")
        thr_ax.grid(axis="x", which="major", alpha=0.3)
    if latency_values:
        low = min(float(np.log10(np.min(_us(v)))) for v in latency_values)
        high = max(float(np.log10(np.max(_us(v)))) for v in latency_values)
        for lat_ax, _ in axes:
            lat_ax.set_ylim(low - 0.18, high + 0.18)  # a factor of 1.5 either side

    handles: list[Any] = [Patch(label=family, **style(family)) for family in pdc_families]
    handles += [
        Patch(label=f"{family} (baseline)", **style(family)) for family in baseline_families
    ]
    handles += [
        Line2D([], [], color="black", marker="_", markersize=14, linestyle="", label="median"),
        Line2D([], [], color="black", marker="v", linestyle="", label="p99"),
    ]
    fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=9, frameon=False)
    interrupted = " (interrupted: partial results)" if result.interrupted else ""
    fig.suptitle(f"pdc bench: each pdc path against its baselines{interrupted}")
    legend_rows = -(-len(handles) // 4)
    # Room at the bottom for the legend: about a quarter of an inch per row of it.
    fig.tight_layout(rect=(0, 0.25 * legend_rows / fig.get_figheight(), 1, 1))
    return fig


def _us(samples_ns: Any) -> Any:
    """Latency samples in microseconds, at least 1 ns (a log scale has no zero)."""
    return np.maximum(np.asarray(samples_ns, dtype=np.float64), 1.0) / 1e3


def _log_ticks(ax: Any) -> None:
    """Label an axis of log10(us) in microseconds: a major tick per decade, minor ticks
    at 2..9 times each."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, MultipleLocator

    ax.yaxis.set_major_locator(MultipleLocator(1.0))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{10**value:g}"))
    low, high = -3, 7  # 1 ns to 10 s
    minors = [np.log10(m) + k for k in range(low, high) for m in range(2, 10)]
    ax.yaxis.set_minor_locator(FixedLocator(minors))


def _distinct(count: int) -> list[str]:
    """``count`` distinct colours (up to 60: matplotlib's tab20, tab20b and tab20c)."""
    import matplotlib
    from matplotlib.colors import to_hex

    palettes = [matplotlib.colormaps[name] for name in ("tab20", "tab20b", "tab20c")]
    every = [to_hex(palette(i)) for palette in palettes for i in range(20)]
    return [every[i % len(every)] for i in range(count)]


# -- the command ------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``pdc bench``."""
    parser.add_argument("--quick", action="store_true", help="a fast, rough run (seconds)")
    parser.add_argument("--n", type=int, help="round trips per path per round")
    parser.add_argument("--rounds", type=int, help="rounds (paths interleaved per round)")
    parser.add_argument(
        "--async-backend",
        choices=("asyncio", "trio", "both"),
        default="both",
        help="event loop(s) to measure (default both)",
    )
    parser.add_argument(
        "--backend",
        metavar="NAME",
        help="also the resident ring of this backend (one with persistent kernels): a "
        "session's request, awaiting and spinning, and a kernel actor's ask, against "
        "the ring's floor (the kernel driven from Python without a session); and the "
        "paths its plugin registers (for a third-party backend, only those)",
    )
    parser.add_argument("--json", action="store_true", help="print results as JSON")
    parser.add_argument(
        "--plot", metavar="FILE.png", help="draw latency and throughput, path by path"
    )


def _refuse_backend(name: str) -> str | None:
    """Why ``--backend name`` cannot be measured here, or ``None``: it must run pdc's
    resident ring (persistent kernels, a kernel body of the benchmark's) or have
    benchmark paths of its plugin's, and those must list cleanly."""
    from .._plugins import resolve_backend

    try:
        backend = resolve_backend(name)
    except Exception as exc:  # unknown or unavailable: its own words
        return f"--backend {name}: {exc}"
    try:
        theirs = backend_benchmarks(backend)
    except PluginError as exc:
        return f"--backend {name}: {exc}"
    if theirs or _resident(backend):
        return None
    if not backend.has(Capability.PERSISTENT_KERNELS):
        return f"--backend {name}: the {backend.name} backend runs no persistent kernels"
    return (
        f"--backend {name}: the benchmark has no kernel body for the {backend.name} backend, "
        "and its plugin registers no benchmark paths (pdc_register_benchmarks)"
    )


#: How to get a baseline that runs only when something optional is installed.
BASELINE_INSTALL: Final = {
    PYDOTCOMPUTE: "pip install pydotcompute==0.2.0",
    PYDOTCOMPUTE_STREAMING: "pip install pydotcompute==0.2.0",
}


class _Footnotes:
    """Baselines that did not run, each named once under the tables, with how to get it."""

    def __init__(self) -> None:
        self.numbers: dict[str, int] = {}

    def mark(self, baselines: list[str]) -> str:
        """``n/a [1]``: the row's ratios are missing; the footnotes say why."""
        marks = [self.numbers.setdefault(name, len(self.numbers) + 1) for name in baselines]
        return "n/a " + " ".join(f"[{number}]" for number in marks)

    def lines(self) -> list[str]:
        out = []
        for name, number in self.numbers.items():
            hint = BASELINE_INSTALL.get(name)
            out.append(f"[{number}] {name} did not run" + (f": {hint}" if hint else ""))
        return out


def _no_ratio(entry: dict[str, Any], notes: _Footnotes | None = None) -> str:
    """What a row without ratios says: a baseline, or which baselines did not run
    (a footnote mark; without ``notes``, the names and how to get each)."""
    if entry.get("baseline"):
        return "(baseline)"
    missing = entry.get("missing_baselines") or ["its baselines"]
    if notes is not None:
        return notes.mark(missing)
    parts = []
    for name in missing:
        hint = BASELINE_INSTALL.get(name)
        parts.append(f"{name} did not run ({hint})" if hint else f"{name} did not run")
    return "n/a: " + "; ".join(parts)


def _ratios(entry: dict[str, Any], prefix: str) -> str:
    """One ratio per line, to three significant digits: ``0.4x bare anyio streams``."""
    return "\n".join(
        f"{value:.3g}x {name[len(prefix) :]}"
        for name, value in entry.items()
        if name.startswith(prefix)
    )


def _loops(payload: dict[str, Any]) -> list[str]:
    keys = [*payload["latency"], *payload["throughput"]]
    return list(dict.fromkeys(key.split(" / ", 1)[0] for key in keys))


def _table(payload: dict[str, Any], console: Any = None) -> None:
    """The tables, one pair per event loop, readable at 80 columns: each ratio on a line
    of its own, its direction in the header, and each baseline that did not run named
    once, in a footnote."""
    from rich.console import Console
    from rich.table import Table

    console = console if console is not None else Console()
    notes = _Footnotes()
    for loop in _loops(payload):
        latency = Table(title=f"Round-trip latency on {loop} (us; lower is better)")
        latency.add_column("path", overflow="fold")
        for column in ("p50", "p90", "p99"):
            latency.add_column(column, justify="right", no_wrap=True)
        latency.add_column("p50 / baseline's\n(lower is better)")
        for key, entry in payload["latency"].items():
            owner, label = key.split(" / ", 1)
            if owner != loop:
                continue
            latency.add_row(
                label,
                f"{entry['p50_us']:.1f}",
                f"{entry['p90_us']:.1f}",
                f"{entry['p99_us']:.1f}",
                _ratios(entry, "p50_vs_") or _no_ratio(entry, notes),
            )
        if latency.row_count:
            console.print(latency)
        throughput = Table(title=f"Throughput into one actor on {loop} (higher is better)")
        throughput.add_column("path", overflow="fold")
        throughput.add_column("msgs/s\n(median)", justify="right", no_wrap=True)
        throughput.add_column("rate / baseline's\n(higher is better)")
        for key, entry in payload["throughput"].items():
            owner, label = key.split(" / ", 1)
            if owner != loop:
                continue
            throughput.add_row(
                label,
                f"{entry['msgs_per_s']:,.0f}",
                _ratios(entry, "x_vs_") or _no_ratio(entry, notes),
            )
        if throughput.row_count:
            console.print(throughput)
    for line in notes.lines():
        console.print(line, highlight=False, soft_wrap=True)


def run(args: argparse.Namespace) -> int:
    """``pdc bench``: measure, show a table (or JSON), optionally plot; 130 on Ctrl-C."""
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            return error("bench", PLOT_HINT)
    backends: tuple[str, ...] = (
        ("asyncio", "trio") if args.async_backend == "both" else (args.async_backend,)
    )
    if "trio" in backends:
        try:
            import trio  # noqa: F401
        except ImportError:
            if args.async_backend == "trio":
                return error("bench", "trio is not installed: pip install trio")
            print(
                "pdc bench: trio is not installed (pip install trio): measuring asyncio only",
                file=sys.stderr,
            )
            backends = ("asyncio",)
    if args.backend is not None:
        refusal = _refuse_backend(args.backend)
        if refusal is not None:
            print(f"pdc bench: error: {refusal}", file=sys.stderr)
            return 2
    n = args.n if args.n is not None else (300 if args.quick else 5000)
    rounds = args.rounds if args.rounds is not None else (1 if args.quick else 3)
    for name, value in (("--n", n), ("--rounds", rounds)):
        if value < 1:
            return error("bench", f"{name} must be at least 1, got {value}")
    warmup = min(500, max(50, n // 10))
    throughput_n = 2000 if args.quick else 50_000

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    result = BenchResult()
    progress = Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
    )
    task = progress.add_task("benchmarking", total=steps(rounds, backends, args.backend))

    announce = announce_once("bench", f"({', '.join(backends)})")

    def on_step(key: str) -> None:
        announce()  # a first measurement is in
        progress.update(task, advance=1, description=key)

    with progress:
        try:
            run_suite(
                result,
                n=n,
                rounds=rounds,
                warmup=warmup,
                throughput_n=throughput_n,
                async_backends=backends,
                on_step=on_step,
                backend=args.backend,
            )
        except KeyboardInterrupt:
            result.interrupted = True
        except BaseExceptionGroup as group:
            if not only_interrupts(group):
                raise
            result.interrupted = True
    payload = result.payload()
    if args.json:
        json.dump(payload, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        _table(payload)
    if args.plot and result.latency_samples:
        plot(result, args.plot)
        print(f"plot written to {args.plot}", file=sys.stderr)
    for line in result.errors.values():
        print(f"pdc bench: error: {line}", file=sys.stderr)
    if result.interrupted:
        print("interrupted: partial results above", file=sys.stderr)
        return 130
    return 1 if result.errors else 0
