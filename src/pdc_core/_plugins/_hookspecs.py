"""The hooks a pdc plugin may implement, and the markers for them.

Plugins are found through the ``pdc`` entry-point group. Each entry point names an
object (usually a module) carrying hook implementations marked with :data:`hookimpl`.
Hooks are synchronous and *register* things::

    from pdc_core.backend import hookimpl

    @hookimpl
    def pdc_register_backends(register):
        register(MineBackend)               # or, imported only when needed:
        register(LazyBackend("mine", "pdc-mine", "pdc_mine.backend:MineBackend",
                             priority=20, availability=mine_availability))

    @hookimpl
    def pdc_register_placements(register):
        register("ray", open_ray_placement, "a Ray worker process")

    @hookimpl
    def pdc_register_info(register):
        register("ray", ray_cluster_report, "the Ray cluster this machine can reach")

    @hookimpl
    def pdc_register_benchmarks(register):
        register("mine", mine_benchmark_paths, "the hand-written floor of mine's kernels")
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from .._backend._contract import Availability, Backend

__all__ = [
    "ENTRY_POINT_GROUP",
    "PROJECT_NAME",
    "BenchmarkPath",
    "BenchmarkPaths",
    "InfoReport",
    "LazyBackend",
    "lazy_exports",
    "OpenPlacement",
    "PdcHookSpecs",
    "hookimpl",
    "hookspec",
]

ENTRY_POINT_GROUP = "pdc"
PROJECT_NAME = "pdc"

#: What ``pdc_register_placements`` registers: called with no arguments, returns an
#: async context manager that yields a placement (what ``start_actor(placement=)``
#: takes) and holds what it needs (a cluster connection) until it exits.
OpenPlacement = Callable[[], AbstractAsyncContextManager[Any]]
#: What ``pdc_register_info`` registers: called by ``pdc info``, returns a JSON-ready
#: mapping (str keys; str, number, bool, None, list or nested mapping values).
InfoReport = Callable[[], Mapping[str, Any]]


@dataclass(frozen=True)
class BenchmarkPath:
    """One measurement a backend adds to ``pdc bench --backend NAME``.

    ``await sampler(n, warmup)`` makes ``warmup`` untimed round trips, then ``n`` timed
    ones, and returns the ``n`` samples in nanoseconds. pdc runs it in a fresh event
    loop of each loop it measures (asyncio, trio), interleaved with the other paths; it
    must check every reply, reach a checkpoint now and then (so Ctrl-C ends it) and
    leave nothing running when it returns or is cancelled.

    pdc shows it as ``"<label> (NAME)"``. A path with no ``baselines`` is a baseline
    (a floor, a launch path); one with ``baselines`` is one of pdc's own and its p50 is
    also shown as a ratio to each of theirs (labels of the same backend's paths, as
    given here). With ``resident_baseline`` pdc's built-in resident paths of the
    backend (a session's request, awaiting and spinning, and a kernel actor's
    ``ask``, on one 16-byte record) are held against it too: the floor or launch
    path of that record size. Where pdc has no kernel body for the backend, only the
    plugin's paths are measured. A sampler that fails (raises, is not async, returns
    anything but ``n`` non-negative int samples) fails its own path alone: one error
    line naming the plugin and the path, and ``pdc bench`` exits with status 1.
    """

    label: str
    sampler: Callable[[int, int], Awaitable[list[int]]]
    baselines: tuple[str, ...] = ()
    resident_baseline: bool = False


#: What ``pdc_register_benchmarks`` registers: called by ``pdc bench --backend NAME``
#: with the backend instance being measured, returns the :class:`BenchmarkPath` objects
#: that can run on it (none where it has nothing of its own to add).
BenchmarkPaths = Callable[["Backend"], Iterable[BenchmarkPath]]


@dataclass(frozen=True)
class LazyBackend:
    """A backend registered by name, its class imported only when pdc needs the class.

    Registering the class itself imports its module, and with it everything that module
    imports, in every process that looks for a backend, including those where the
    backend cannot run. ``register(LazyBackend(...))`` instead tells pdc what it needs
    to rank and probe the backend, and where the class is::

        register(LazyBackend("mine", "pdc-mine", "pdc_mine.backend:MineBackend",
                             priority=20, availability=mine_availability))

    pdc calls ``priority`` (an int, or a function returning one) and ``availability``
    (a function returning an :class:`~pdc_core.backend.Availability`, called at most
    once per process) to choose the default backend; both must be cheap and import
    neither the class nor vendor libraries. pdc imports ``target``
    (``"module:ClassName"``) only when the backend is chosen, listed in detail
    (``pdc plugins``, ``pdc info``, an error message listing the backends) or asked
    for its devices. The class must carry the same ``name`` and ``distribution``; its
    own ``priority`` and ``availability()`` should give what these do (call the same
    functions), since pdc ranks and probes with these. A class that fails to import
    or does not match makes a :class:`~pdc_core.BackendError` naming the backend and
    its plugin when it is needed, not an error at registration.
    """

    name: str
    distribution: str
    target: str
    priority: int | Callable[[], int]
    availability: Callable[[], Availability]


def lazy_exports(package: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` that imports each name on first use.

    ``homes`` maps a public name to the module it lives in, relative to ``package``
    (``{"MineBackend": "._backend"}``). A plugin's entry point imports its package in
    every process that looks for a backend, so a package that registers a
    :class:`LazyBackend` keeps its ``__init__`` cheap with::

        __getattr__ = lazy_exports(__name__, {"MineBackend": "._backend"})

    The first lookup of a name imports its module and stores the value in the package,
    so later lookups skip the function; an unknown name raises :class:`AttributeError`.
    (For type checkers, import the names under ``if TYPE_CHECKING:`` too.)
    """

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home, package), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__


hookspec = pluggy.HookspecMarker(PROJECT_NAME)
#: Marks a function of a plugin as the implementation of a ``pdc_`` hook.
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


class PdcHookSpecs:
    """The hooks a pdc plugin may implement."""

    @hookspec
    def pdc_register_backends(
        self, register: Callable[[type[Backend] | LazyBackend], None]
    ) -> None:
        """Register backends by calling ``register(BackendSubclass)`` or
        ``register(LazyBackend(...))``.

        Called once per process, when backends are first needed. Must not import
        vendor libraries that may be missing; do that inside the backend's methods.
        Where importing the backend's class costs more than a few milliseconds (it
        imports much of the plugin), register a :class:`LazyBackend`: then a process
        that picks another backend never imports it.
        """

    @hookspec
    def pdc_register_placements(self, register: Callable[[str, OpenPlacement, str], None]) -> None:
        """Register named placements by calling ``register(name, open, description)``.

        ``name`` is what ``pdc demo --placement NAME`` selects (a lower-case word such
        as ``"ray"``). ``open()`` is called when the placement is used and returns an
        async context manager (:data:`OpenPlacement`) that yields the placement object
        for ``start_actor(..., placement=...)`` and releases what it holds on exit.
        Registering must stay cheap: import heavy or optional libraries inside
        ``open``, never here.
        """

    @hookspec
    def pdc_register_info(self, register: Callable[[str, InfoReport, str], None]) -> None:
        """Register sections of ``pdc info`` by calling ``register(name, report, title)``.

        ``report()`` runs each time ``pdc info`` does and returns a JSON-ready mapping
        (:data:`InfoReport`), shown under ``title``; what it raises is shown as the
        section's error. It must not start anything (a cluster, a device context) just
        to describe it, and should answer within a few seconds.
        """

    @hookspec
    def pdc_register_benchmarks(self, register: Callable[[str, BenchmarkPaths, str], None]) -> None:
        """Register a backend's own measurements for ``pdc bench --backend NAME`` by
        calling ``register(name, paths, description)``.

        ``name`` is the backend's name (``"cuda"``). ``paths(backend)`` is called with the
        backend instance each time ``pdc bench --backend NAME`` lists what it will
        measure (a few times per run) and returns the :class:`BenchmarkPath` objects that
        can run on it (:data:`BenchmarkPaths`), such as a hand-written floor or the
        vendor's launch paths; pdc measures them beside its own resident paths. Listing
        must start nothing (the samplers do the work), and registering must stay cheap:
        import the measured code inside ``paths``, never here.
        """
