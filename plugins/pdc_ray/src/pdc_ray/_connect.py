"""Connecting to Ray, and reserving resources: ``connect`` and ``placement_group``."""

# ruff: noqa: ASYNC109

from __future__ import annotations

import functools
import math
import threading
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from concurrent.futures import Future
from contextlib import asynccontextmanager
from typing import Any

import anyio

from ._bridge import await_future
from ._errors import PlacementTimeout

__all__ = ["RayCluster", "connect", "placement_group"]

_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - ray is a dependency of pdc-ray
        raise ImportError("pdc_ray needs Ray: pip install 'ray>=2.60'") from exc
    return ray


class RayCluster:
    """What :func:`connect` yields: the Ray cluster this process is connected to."""

    def __init__(self, started: bool) -> None:
        #: Whether :func:`connect` made this connection (and closes it when its block
        #: exits): a local Ray it started is shut down with it; a cluster it joined,
        #: directly or through Ray Client, keeps running.
        self.started = started

    def resources(self) -> dict[str, float]:
        """The cluster's total resources (``CPU``, ``GPU``, memory, custom ones)."""
        return dict(_ray().cluster_resources())

    def available_resources(self) -> dict[str, float]:
        """The resources free right now."""
        return dict(_ray().available_resources())

    def nodes(self) -> list[dict[str, Any]]:
        """The cluster's nodes, as Ray describes them (``NodeID``, ``Alive``, ...)."""
        return list(_ray().nodes())

    def __repr__(self) -> str:
        how = "started here" if self.started else "joined"
        return f"<RayCluster {how}>"


class _Owner(threading.Thread):
    """The thread that starts Ray and, later, shuts it down.

    Ray ties the daemons it starts to the thread that started them (on Linux they get
    the parent-death signal, which fires when that *thread* exits), so ``ray.init``
    cannot run in a pooled worker thread that may exit while Ray is in use. This
    thread lives as long as the connection; the event loop waits for it through
    futures, never blocking.
    """

    def __init__(self, init: Callable[[], object], shutdown: Callable[[], object]) -> None:
        super().__init__(name="pdc-ray-owner", daemon=True)
        self._init = init
        self._shutdown = shutdown
        self.started: Future[None] = Future()
        self.stopped: Future[None] = Future()
        self.release = threading.Event()

    def run(self) -> None:
        try:
            self._init()
        except BaseException as exc:
            self.started.set_exception(exc)
            self.stopped.set_result(None)
            return
        self.started.set_result(None)
        self.release.wait()
        try:
            self._shutdown()
        except BaseException as exc:
            self.stopped.set_exception(exc)
        else:
            self.stopped.set_result(None)


@asynccontextmanager
async def connect(address: str | None = None, **init_options: Any) -> AsyncIterator[RayCluster]:
    """Connect to Ray for the block: ``async with pdc_ray.connect() as cluster: ...``.

    If this process is already connected (``ray.init`` was called), it uses that
    connection and leaves it open. Otherwise it calls ``ray.init(address, **options)``
    (which joins the cluster at ``address``, or ``RAY_ADDRESS``, or starts a local one)
    and shuts it down when the block exits: ``connect`` shuts down only what it
    started. ``address="ray://HOST:PORT"`` connects through Ray Client (a cluster's
    client server, port 10001 by default): this process then drives the cluster from
    outside it, and remote actors and kernels work as with a direct connection (each
    call goes through the client server).

    ``ray.init`` and ``ray.shutdown`` run in a thread of their own that lives as long
    as the connection (Ray's daemons die with the thread that started them), so the
    event loop (asyncio or trio) keeps running meanwhile. The shutdown is
    shielded from cancellation, and a ``connect`` cancelled while Ray starts shuts
    it down once it has started.
    """
    ray = _ray()
    if ray.is_initialized():
        yield RayCluster(started=False)
        return
    owner = _Owner(functools.partial(ray.init, address=address, **init_options), ray.shutdown)
    owner.start()
    try:
        await await_future(owner.started)
        yield RayCluster(started=True)
    finally:
        owner.release.set()
        with anyio.CancelScope(shield=True):
            await await_future(owner.stopped)


@asynccontextmanager
async def placement_group(
    bundles: Sequence[Mapping[str, float]],
    *,
    strategy: str = "PACK",
    timeout: float = 60.0,
) -> AsyncIterator[Any]:
    """Reserve ``bundles`` of resources for the block, then release them.

    ``bundles`` is a list of resource dicts (``[{"CPU": 1, "GPU": 1}] * 2``);
    ``strategy`` is Ray's (``"PACK"``, ``"SPREAD"``, ``"STRICT_PACK"``,
    ``"STRICT_SPREAD"``). Yields the Ray placement group once every bundle is
    reserved; give it to :func:`pdc_ray.on` (``placement_group=pg, bundle_index=i``).
    Raises :class:`~pdc_ray.PlacementTimeout` when the cluster cannot reserve them
    within ``timeout`` seconds. The group is removed on every exit.
    """
    if isinstance(bundles, Mapping) or not isinstance(bundles, Sequence) or not bundles:
        raise TypeError(f"bundles must be a non-empty list of resource dicts, not {bundles!r}")
    for index, bundle in enumerate(bundles):
        if not isinstance(bundle, Mapping) or not bundle:
            raise TypeError(f"bundle {index} must be a non-empty resource dict, not {bundle!r}")
        for key, amount in bundle.items():
            if (
                isinstance(amount, bool)
                or not isinstance(amount, int | float)
                or not math.isfinite(amount)
                or amount < 0
            ):
                raise ValueError(f"bundle {index}: {key!r} must be a number >= 0, not {amount!r}")
    if strategy not in _STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; choose one of {', '.join(_STRATEGIES)}")
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise ValueError(f"timeout must be a number of seconds > 0, not {timeout!r}")
    ray = _ray()
    if not ray.is_initialized():
        raise RuntimeError("Ray is not connected: use `async with pdc_ray.connect():` first")
    from ray.util import placement_group as make_group
    from ray.util import remove_placement_group

    from ._ray_engine import await_ref

    group = make_group([dict(bundle) for bundle in bundles], strategy=strategy)
    try:
        with anyio.move_on_after(timeout) as scope:
            await await_ref(group.ready())
        if scope.cancelled_caught:
            raise PlacementTimeout(
                f"the cluster could not reserve the bundles {list(bundles)!r} "
                f"({strategy}) within {timeout:g} s"
            )
        yield group
    finally:
        remove_placement_group(group)
