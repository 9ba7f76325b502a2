"""pdc-ray: run pdc actors in Ray worker processes, on any node of a Ray cluster.

The same actor code runs remotely with pdc's guarantees intact::

    import pdc_ray
    from pdc_core import open_nursery

    async with pdc_ray.connect():
        async with open_nursery() as nursery:
            ref = await nursery.start_actor(Detector, placement=pdc_ray.on(num_gpus=1))
            scores = await ref.ask_many(windows)

A :class:`~pdc_core.PersistentKernel` placed the same way runs resident in the worker
(on its GPU with ``num_gpus=1``); its :class:`RemoteKernelRef` ships a structured array
per ``ask_batch`` in one Ray call.

Ray places, owns and watches the processes; pdc keeps the bounded prioritised
mailbox, supervision and the nursery's lifetime rules. See :class:`RemoteRunner` for
the guarantees, and :class:`Engine` for the seam between the runner and Ray
(:class:`pdc_ray.testing.FakeEngine` stands in for Ray in tests).

Importing this package does not import Ray; Ray is imported when a remote actor is
first started on it, or by :func:`connect`. Its names are loaded on first use (every
``pdc`` command imports the plugin, so importing it costs next to nothing).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__

if TYPE_CHECKING:
    from ._connect import RayCluster, connect, placement_group
    from ._engine import Engine, PendingCall, PlacementSpec
    from ._errors import PlacementTimeout, RemoteActorLost, RemoteError
    from ._kernel import RemoteKernelRef, RemoteKernelRunner
    from ._mesh import bundles
    from ._placement import RayPlacement, on
    from ._ray_engine import RayEngine
    from ._runner import RemoteActorRef, RemoteRunner
    from ._wire import Location

__all__ = [
    "Engine",
    "Location",
    "PendingCall",
    "PlacementSpec",
    "PlacementTimeout",
    "RayCluster",
    "RayEngine",
    "RayPlacement",
    "RemoteActorLost",
    "RemoteActorRef",
    "RemoteError",
    "RemoteKernelRef",
    "RemoteKernelRunner",
    "RemoteRunner",
    "__version__",
    "bundles",
    "connect",
    "on",
    "placement_group",
]

#: Where each public name lives (``RayEngine`` imports Ray).
_HOMES = {
    "RayCluster": "_connect",
    "connect": "_connect",
    "placement_group": "_connect",
    "Engine": "_engine",
    "PendingCall": "_engine",
    "PlacementSpec": "_engine",
    "PlacementTimeout": "_errors",
    "RemoteActorLost": "_errors",
    "RemoteError": "_errors",
    "RemoteKernelRef": "_kernel",
    "RemoteKernelRunner": "_kernel",
    "bundles": "_mesh",
    "RayPlacement": "_placement",
    "on": "_placement",
    "RayEngine": "_ray_engine",
    "RemoteActorRef": "_runner",
    "RemoteRunner": "_runner",
    "Location": "_wire",
}
#: Classes documented (and shown in reprs and tracebacks) as ``pdc_ray.X``.
_PUBLIC_PATH = frozenset(
    {
        "Location",
        "PendingCall",
        "PlacementSpec",
        "PlacementTimeout",
        "RemoteActorLost",
        "RemoteError",
        "RemoteActorRef",
        "RemoteKernelRef",
        "RemoteKernelRunner",
        "RemoteRunner",
        "RayPlacement",
    }
)


def _load() -> None:
    """Import every public name (all at once, so every class has its public path)."""
    for name, home in _HOMES.items():
        if home != "_ray_engine":
            globals()[name] = getattr(importlib.import_module(f".{home}", __name__), name)
    for name in _PUBLIC_PATH:
        globals()[name].__module__ = __name__


def __getattr__(name: str) -> Any:
    if name == "RayEngine":  # imports Ray
        from ._ray_engine import RayEngine

        return RayEngine
    if name not in _HOMES:
        raise AttributeError(f"module 'pdc_ray' has no attribute {name!r}")
    _load()  # later lookups find the names in globals() and skip this function
    return globals()[name]


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
