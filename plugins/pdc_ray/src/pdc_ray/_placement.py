"""``pdc_ray.on(...)``: the placement that runs an actor in a Ray worker."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pdc_core import Actor, PersistentKernel
from pdc_core.lowlevel import ActorRunner, StartOptions

from ._engine import Engine, PlacementSpec
from ._kernel import RemoteKernelRunner
from ._runner import RemoteRunner
from ._wire import HostSpec

__all__ = ["RayPlacement", "on"]

_ids = itertools.count(1)


def _number(name: str, value: object, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number, not {value!r}")
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        bound = "> 0" if positive else ">= 0"
        raise ValueError(f"{name} must be finite and {bound}, got {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class RayPlacement:
    """Where and how a remote actor runs: made by :func:`on`, given to
    ``start_actor(..., placement=...)``. Immutable; one placement may start many actors.
    """

    spec: PlacementSpec = field(default_factory=PlacementSpec)
    start_timeout: float = 60.0
    window: int = 4
    heartbeat: float = 3.0
    kill_timeout: float = 10.0
    engine: Engine | None = None
    backend: str | None = None

    def runner_for(
        self, target: object, /, args: tuple[Any, ...], options: StartOptions
    ) -> ActorRunner:
        """Make the :class:`~pdc_ray.RemoteRunner` that runs ``target`` at this placement.

        ``target`` is anything ``start_actor`` runs as a mailbox actor (an ``Actor``
        subclass, instance or factory, or an ``async def`` handler), or a
        :class:`~pdc_core.PersistentKernel` (run resident in the remote process, by a
        :class:`~pdc_ray.RemoteKernelRunner`); it and ``args`` must pickle. Raises
        :class:`TypeError` for anything else (an ``ActorRunner`` cannot be shipped),
        for ``args`` given to a kernel and for ``backend`` given to anything but a
        kernel; :class:`ValueError` for a kernel on a fraction of a GPU.
        """
        if isinstance(target, ActorRunner):
            raise TypeError(
                f"cannot place {target!r}: an ActorRunner runs in this process; place the "
                "actor (an Actor subclass, instance, factory or async handler) or the "
                "PersistentKernel instead (pdc_ray.on(backend=...) picks a kernel's backend)"
            )
        kernel = isinstance(target, PersistentKernel)
        if kernel:
            gpus = self.spec.num_gpus
            if gpus is not None and gpus != int(gpus):
                raise ValueError(
                    f"a persistent kernel stays resident on its GPU: it needs whole GPUs, "
                    f"not num_gpus={gpus:g}"
                )
            if args:
                raise TypeError("positional arguments do not apply to a PersistentKernel")
        elif not (isinstance(target, Actor) or callable(target)):
            raise TypeError(
                f"cannot place {target!r}: pdc_ray.on() runs an Actor subclass, instance or "
                "factory, an async handler function, or a PersistentKernel"
            )
        elif self.backend is not None:
            raise TypeError(
                f"pdc_ray.on(backend={self.backend!r}) applies to a PersistentKernel only, "
                f"not to {target!r}"
            )
        engine = self.engine
        if engine is None:
            from ._ray_engine import RayEngine

            engine = RayEngine()
        actor_id = options.name
        if actor_id is None:
            label = (
                target.name
                if isinstance(target, PersistentKernel)
                else getattr(target, "__name__", None) or type(target).__name__
            )
            actor_id = f"{label}@{engine.name}-{next(_ids)}"
        spec = HostSpec(
            actor_id=actor_id,
            target=target,
            args=args,
            capacity=options.capacity,
            max_batch=options.max_batch,
            paused=options.paused,
            backend=self.backend,
        )
        runner = RemoteKernelRunner if kernel else RemoteRunner
        return runner(
            engine,
            spec,
            self.spec,
            options,
            window=self.window,
            heartbeat=self.heartbeat,
            start_timeout=self.start_timeout,
            kill_timeout=self.kill_timeout,
        )


def on(
    *,
    num_cpus: float | None = None,
    num_gpus: float | None = None,
    resources: Mapping[str, float] | None = None,
    node: str | None = None,
    runtime_env: Mapping[str, Any] | None = None,
    start_timeout: float = 60.0,
    placement_group: Any = None,
    bundle_index: int = -1,
    window: int = 4,
    heartbeat: float = 3.0,
    kill_timeout: float = 10.0,
    engine: Engine | None = None,
    backend: str | None = None,
) -> RayPlacement:
    """Run an actor in a Ray worker: ``start_actor(Target, placement=pdc_ray.on(...))``.

    ``num_cpus``, ``num_gpus`` and ``resources`` (custom resources, e.g.
    ``{"accelerator": 1}``) are what Ray reserves for the actor; ``node`` pins it to a
    node id (hard affinity); ``placement_group`` and ``bundle_index`` place it in a
    reserved bundle (see :func:`pdc_ray.placement_group`); ``runtime_env`` is Ray's.
    Ray's own restarts and retries are off: a :class:`~pdc_core.RestartPolicy` given to
    ``start_actor`` restarts the actor in a fresh worker.

    ``start_timeout`` bounds the start handshake, placement included (a placement no
    node can satisfy would otherwise wait forever). ``window`` is the most batches in
    flight at once. ``heartbeat`` bounds the detection of a lost worker or node (Ray
    itself takes about 15 s). ``kill_timeout`` bounds the wait for Ray to report the
    worker dead after the actor ends. ``engine`` replaces Ray (tests use
    :class:`pdc_ray.testing.FakeEngine`).

    A :class:`~pdc_core.PersistentKernel` runs resident in the worker, on the backend
    ``backend`` names (``"cuda"``, ``"cpu"``, ...; default: the worker's best available
    backend, which is ``cuda`` on a node where Ray gave the actor a GPU). It needs whole
    GPUs: a fractional ``num_gpus`` is refused when it is started.
    """
    cpus = None if num_cpus is None else _number("num_cpus", num_cpus)
    gpus = None if num_gpus is None else _number("num_gpus", num_gpus)
    custom: dict[str, float] = {}
    for key, amount in (resources or {}).items():
        if not isinstance(key, str) or not key:
            raise TypeError(f"resource names must be non-empty strings, got {key!r}")
        if key in ("CPU", "GPU"):
            raise ValueError(f"give {key} through num_cpus/num_gpus, not resources")
        custom[key] = _number(f"resources[{key!r}]", amount)
    if node is not None and (not isinstance(node, str) or not node):
        raise TypeError(f"node must be a Ray node id (a hex string), not {node!r}")
    if runtime_env is not None and not isinstance(runtime_env, Mapping):
        raise TypeError(f"runtime_env must be a mapping, not {runtime_env!r}")
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be an int >= 1, got {window!r}")
    if isinstance(bundle_index, bool) or not isinstance(bundle_index, int) or bundle_index < -1:
        raise ValueError(f"bundle_index must be an int >= -1, got {bundle_index!r}")
    if bundle_index != -1 and placement_group is None:
        raise ValueError("bundle_index needs a placement_group")
    if node is not None and placement_group is not None:
        raise ValueError("give node or placement_group, not both")
    if engine is not None and not isinstance(engine, Engine):
        raise TypeError(f"engine must be a pdc_ray.Engine, not {engine!r}")
    if backend is not None and (not isinstance(backend, str) or not backend):
        raise TypeError(f"backend must be a backend name such as 'cuda', not {backend!r}")
    spec = PlacementSpec(
        num_cpus=cpus,
        num_gpus=gpus,
        resources=custom,
        node=node,
        runtime_env=dict(runtime_env) if runtime_env is not None else None,
        placement_group=placement_group,
        bundle_index=bundle_index,
    )
    return RayPlacement(
        spec=spec,
        start_timeout=_number("start_timeout", start_timeout, positive=True),
        window=window,
        heartbeat=_number("heartbeat", heartbeat, positive=True),
        kill_timeout=_number("kill_timeout", kill_timeout, positive=True),
        engine=engine,
        backend=backend,
    )
