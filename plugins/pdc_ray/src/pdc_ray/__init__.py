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
import itertools
from typing import TYPE_CHECKING, Any

from ._version import __version__ as __version__

if TYPE_CHECKING:  # the names of _LAZY, for type checkers (a test holds them alike)
    from ._connect import RayCluster as RayCluster
    from ._connect import connect as connect
    from ._connect import placement_group as placement_group
    from ._engine import Engine as Engine
    from ._engine import PendingCall as PendingCall
    from ._engine import PlacementSpec as PlacementSpec
    from ._errors import PlacementTimeout as PlacementTimeout
    from ._errors import RemoteActorLost as RemoteActorLost
    from ._errors import RemoteError as RemoteError
    from ._kernel import RemoteKernelRef as RemoteKernelRef
    from ._kernel import RemoteKernelRunner as RemoteKernelRunner
    from ._mesh import bundles as bundles
    from ._placement import RayPlacement as RayPlacement
    from ._placement import on as on
    from ._ray_engine import RayEngine as RayEngine
    from ._runner import RemoteActorRef as RemoteActorRef
    from ._runner import RemoteRunner as RemoteRunner
    from ._wire import Location as Location

#: The public names, by the module they live in (``RayEngine``'s imports Ray).
_LAZY = {
    "._connect": ("RayCluster", "connect", "placement_group"),
    "._engine": ("Engine", "PendingCall", "PlacementSpec"),
    "._errors": ("PlacementTimeout", "RemoteActorLost", "RemoteError"),
    "._kernel": ("RemoteKernelRef", "RemoteKernelRunner"),
    "._mesh": ("bundles",),
    "._placement": ("RayPlacement", "on"),
    "._ray_engine": ("RayEngine",),
    "._runner": ("RemoteActorRef", "RemoteRunner"),
    "._wire": ("Location",),
}

__all__ = sorted(["__version__", *itertools.chain(*_LAZY.values())])

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
    for home, names in _LAZY.items():
        if home != "._ray_engine":
            module = importlib.import_module(home, __name__)
            for name in names:
                globals()[name] = getattr(module, name)
    for name in _PUBLIC_PATH:
        globals()[name].__module__ = __name__


def __getattr__(name: str) -> Any:
    if name == "RayEngine":  # imports Ray
        from ._ray_engine import RayEngine

        return RayEngine
    if name not in __all__:
        raise AttributeError(f"module 'pdc_ray' has no attribute {name!r}")
    _load()  # later lookups find the names in globals() and skip this function
    return globals()[name]


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
