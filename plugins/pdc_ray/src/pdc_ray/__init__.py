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
mailbox, supervision and the nursery's lifetime rules. See :mod:`pdc_ray._runner` for
the guarantees, and :class:`Engine` for the seam between the runner and Ray
(:class:`pdc_ray.testing.FakeEngine` stands in for Ray in tests).

Importing this package does not import Ray; Ray is imported when a remote actor is
first started on it, or by :func:`connect`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._connect import RayCluster, connect, placement_group
from ._engine import Engine, PendingCall, PlacementSpec
from ._errors import PlacementTimeout, RemoteActorLost, RemoteError
from ._kernel import RemoteKernelRef, RemoteKernelRunner
from ._mesh import bundles
from ._placement import RayPlacement, on
from ._runner import RemoteActorRef, RemoteRunner
from ._version import __version__
from ._wire import Location

if TYPE_CHECKING:
    from ._ray_engine import RayEngine

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

for _name in (
    "Location",
    "PendingCall",
    "PlacementSpec",
    "RemoteActorRef",
    "RemoteKernelRef",
    "RemoteKernelRunner",
    "RemoteRunner",
    "RayPlacement",
):
    globals()[_name].__module__ = __name__


def __getattr__(name: str) -> Any:
    if name == "RayEngine":  # imports Ray
        from ._ray_engine import RayEngine

        return RayEngine
    raise AttributeError(f"module 'pdc_ray' has no attribute {name!r}")
