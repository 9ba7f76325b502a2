"""The Ray engine: host processes are Ray async actors.

Each remote actor's host is one Ray actor created with Ray's restarts and retries off
(``max_restarts=0``, ``max_task_retries=0``: delivery is at most once, and pdc's
``RestartPolicy`` does the restarting), never detached (it shares the fate of the
process that created it). Its control methods run in their own concurrency group,
so a full data path cannot starve a stop, a pause, a statistics request or a
heartbeat. Calls are awaited through :func:`pdc_ray._bridge.await_future`, under
asyncio and trio alike.
"""

from __future__ import annotations

import asyncio
import os
import pickle
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

import anyio
import anyio.lowlevel
import numpy as np
import numpy.typing as npt
import ray
import ray.exceptions
from ray.util.scheduling_strategies import (
    NodeAffinitySchedulingStrategy,
    PlacementGroupSchedulingStrategy,
)

from ._bridge import await_future
from ._engine import Engine, PendingCall, PlacementSpec
from ._errors import RemoteActorLost
from ._host import Host, host_for
from ._wire import HostSpec, Location, sendable_outcome

__all__ = ["RayEngine", "await_ref"]

T = TypeVar("T")

#: Ray, for the parts of its API its type hints do not cover.
_untyped_ray: Any = ray
#: Ray's copy of cloudpickle (untyped).
_cloudpickle: Any = ray.cloudpickle

#: Concurrent control calls a host takes (watch holds one for the actor's life).
_CONTROL_CONCURRENCY = 16

#: Ray errors that mean the actor's process (or its node, or the object's owner) is gone.
_LOST: tuple[type[BaseException], ...] = (
    ray.exceptions.RayActorError,
    ray.exceptions.WorkerCrashedError,
    ray.exceptions.NodeDiedError,
    ray.exceptions.ObjectLostError,
    ray.exceptions.OwnerDiedError,
)


def _locate() -> Location:
    context = ray.get_runtime_context()
    return Location(
        node_id=context.get_node_id(),
        node_ip=_untyped_ray.util.get_node_ip_address(),
        pid=os.getpid(),
        gpu_ids=tuple(str(gpu) for gpu in ray.get_gpu_ids()),
        actor_ref_id=context.get_actor_id() or "",
    )


#: Buffers of this many bytes or more (a large NumPy array's data) travel beside the
#: pickle, as NumPy arrays, which Ray ships through its object store without copying
#: them into the pickle (and without pickling them again).
_OUT_OF_BAND = 64 * 1024


def _dumps(value: Any) -> tuple[Any, ...]:
    """``value`` pickled as Ray pickles it (by value where it must: classes of a
    script's ``__main__``, lambdas): ``(pickle bytes, *large buffers)``."""
    buffers: list[npt.NDArray[np.uint8]] = []

    def in_band(buffer: pickle.PickleBuffer) -> bool:
        raw = buffer.raw()
        if raw.nbytes < _OUT_OF_BAND:
            return True
        buffers.append(np.frombuffer(raw, np.uint8))
        return False

    return (_cloudpickle.dumps(value, protocol=5, buffer_callback=in_band), *buffers)


def _loads(packed: tuple[Any, ...]) -> Any:
    """The value :func:`_dumps` packed."""
    return pickle.loads(packed[0], buffers=packed[1:])


def _reply(value: Any) -> Any:
    """A host method's packed result: the pickle alone when it has no large buffers
    (Ray returns ``bytes`` with less work than a tuple)."""
    packed = _dumps(value)
    return packed[0] if len(packed) == 1 else packed


def _unreply(reply: Any) -> Any:
    return _loads((reply,) if isinstance(reply, bytes) else reply)


_NOTHING = _reply(None)


class RayHost:
    """The Ray actor class around a :class:`~pdc_ray._host.Host` (one per remote actor).

    Its methods (but ``echo``) take their arguments and return their result pickled
    by pdc-ray, as one ``bytes`` each (large NumPy buffers, such as a persistent
    kernel's batch of records, beside it as arrays): Ray ships ``bytes`` with less work
    than any other argument, so a call with several arguments costs less than one
    with a single ``int`` (measured in docs/benchmarks.md, "pdc-ray").

    Ray runs each concurrency group of an async actor in an event loop (and thread) of
    its own. The Host, its nursery and the user's actor live in the default group's
    loop, made there by ``start``; the control methods run in the ``"control"`` group's
    loop and hand their work to the Host's loop thread-safely. So a busy actor delays
    neither its heartbeat (``ping`` answers from the control loop: the process is
    alive) nor the arrival of a stop.
    """

    def __init__(self, spec: HostSpec) -> None:
        self._spec = spec
        self._host: Host | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def _spawn(self, fn: Callable[[], Awaitable[None]]) -> None:
        async def run() -> None:
            await fn()

        task = asyncio.get_running_loop().create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _on_host_loop(self, fn: Callable[[Host], Awaitable[T]]) -> T:
        host, loop = self._host, self._loop
        if host is None or loop is None:
            raise RuntimeError("the host of this actor has not been started")

        async def run() -> T:
            return await fn(host)

        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(run(), loop))

    async def _control(self, args: tuple[Any, ...], method: Callable[..., Awaitable[Any]]) -> Any:
        arguments = _loads(args)
        return _reply(await self._on_host_loop(lambda host: method(host, *arguments)))

    async def start(self, *args: Any) -> Any:
        if self._host is None:
            self._loop = asyncio.get_running_loop()
            self._host = host_for(self._spec, _locate)
        return _reply(await self._host.start(self._spawn))

    async def echo(self, value: Any) -> Any:
        """Return ``value``: a bare call to this actor, for benchmarks and diagnostics."""
        return value

    async def deliver(self, *args: Any) -> Any:
        assert self._host is not None, "deliver before start"
        return sendable_outcome(await self._host.deliver(*_loads(args)), _reply)

    @ray.method(concurrency_group="control")
    async def cancel(self, *args: Any) -> Any:
        return await self._control(args, Host.cancel)

    @ray.method(concurrency_group="control")
    async def stop(self, *args: Any) -> Any:
        return await self._control(args, Host.stop)

    @ray.method(concurrency_group="control")
    async def pause(self, *args: Any) -> Any:
        return await self._control(args, Host.pause)

    @ray.method(concurrency_group="control")
    async def resume(self, *args: Any) -> Any:
        return await self._control(args, Host.resume)

    @ray.method(concurrency_group="control")
    async def statistics(self, *args: Any) -> Any:
        return await self._control(args, Host.statistics)

    @ray.method(concurrency_group="control")
    async def ping(self, *args: Any) -> Any:
        return _NOTHING

    @ray.method(concurrency_group="control")
    async def watch(self, *args: Any) -> Any:
        return await self._control(args, Host.watch)

    @ray.method(concurrency_group="control")
    async def locate(self, *args: Any) -> Any:
        return _reply(_locate())


_remote_host: Any = None


def _host_class() -> Any:
    global _remote_host
    if _remote_host is None:
        _remote_host = _untyped_ray.remote(
            concurrency_groups={"control": _CONTROL_CONCURRENCY},
            max_restarts=0,
            max_task_retries=0,
        )(RayHost)
    return _remote_host


async def await_ref(ref: Any) -> Any:
    """Await a Ray ``ObjectRef`` under asyncio or trio; a lost actor, worker, node or
    owner raises :class:`~pdc_ray.RemoteActorLost`."""
    try:
        return await await_future(ref.future())
    except _LOST as exc:
        raise RemoteActorLost(f"{type(exc).__name__}: {exc}") from exc
    except ray.exceptions.RayTaskError as exc:
        raise cast(Any, exc).as_instanceof_cause() from None


_PENDING = object()


class _RayCall(PendingCall):
    """A call to a Ray actor: its ``ObjectRef``, awaited through :func:`await_ref`, or
    followed by a done callback (Ray's ``ObjectRef._on_completed``, which
    ``ObjectRef.future()`` is made of, without the ``concurrent.futures.Future``)."""

    __slots__ = ("_data", "_ref")

    def __init__(self, ref: Any) -> None:
        self._ref = ref
        self._data: Any = _PENDING

    async def result(self) -> Any:
        return _unreply(await await_ref(self._ref))

    def add_done_callback(self, callback: Callable[[], object]) -> bool:
        on_completed = getattr(self._ref, "_on_completed", None)
        if on_completed is None:  # pragma: no cover - a Ray without it
            return False

        def done(data: Any) -> None:  # in a thread of Ray's core worker
            self._data = data
            callback()

        on_completed(done)
        return True

    def result_nowait(self) -> Any:
        data = self._data
        if data is _PENDING:
            raise RuntimeError("the call has not completed")
        if isinstance(data, BaseException):  # Ray hands errors over as values
            if isinstance(data, _LOST):
                raise RemoteActorLost(f"{type(data).__name__}: {data}") from data
            if isinstance(data, ray.exceptions.RayTaskError):
                raise cast(Any, data).as_instanceof_cause() from None
            raise data
        return _unreply(data)


def _options(spec: HostSpec, placement: PlacementSpec) -> dict[str, Any]:
    options: dict[str, Any] = {"name": None, "lifetime": None}
    if placement.num_cpus is not None:
        options["num_cpus"] = placement.num_cpus
    if placement.num_gpus is not None:
        options["num_gpus"] = placement.num_gpus
    if placement.resources:
        options["resources"] = dict(placement.resources)
    if placement.runtime_env is not None:
        options["runtime_env"] = dict(placement.runtime_env)
    if placement.node is not None:
        options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(placement.node, soft=False)
    elif placement.placement_group is not None:
        options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
            placement.placement_group,
            placement_group_bundle_index=placement.bundle_index,
        )
    return options


class RayEngine(Engine):
    """Runs hosts as Ray actors in the cluster this process is connected to.

    Needs ``ray.init`` first: use :func:`pdc_ray.connect`.
    """

    name = "ray"

    async def create(self, spec: HostSpec, placement: PlacementSpec) -> object:
        """Create the host as a Ray actor with the placement's options (not detached,
        not named) and return its handle without waiting for it to be scheduled.

        Raises :class:`RuntimeError` when Ray is not connected and :class:`TypeError`
        when Ray refuses the options or the spec. Cancelled at its checkpoint, it
        drops the only handle, and Ray ends an actor that no handle refers to.
        """
        if not ray.is_initialized():
            raise RuntimeError(
                "Ray is not connected: run the nursery inside `async with pdc_ray.connect():`"
                " (or call ray.init() first)"
            )
        try:
            handle: object = _host_class().options(**_options(spec, placement)).remote(spec)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"cannot create remote actor {spec.actor_id!r}: {exc}") from exc
        await anyio.lowlevel.checkpoint()
        return handle

    def submit(self, actor: object, method: str, *args: Any, control: bool = False) -> PendingCall:
        try:
            packed = _dumps(args)
        except Exception as exc:
            raise TypeError(
                f"the arguments of {method}() could not be sent: {type(exc).__name__}: {exc}"
            ) from exc
        return _RayCall(getattr(actor, method).remote(*packed))

    async def kill(self, actor: object) -> None:
        """``ray.kill`` (no restart), then ping the actor until Ray reports it lost.

        The kill is sent at once; cancelling it abandons only the wait for Ray's
        report.
        """
        ray.kill(cast(Any, actor), no_restart=True)
        # Ray reports the actor dead once calls to it fail as lost.
        delay = 0.005
        while True:
            try:
                await await_ref(actor.ping.remote())  # type: ignore[attr-defined]
            except RemoteActorLost:
                return
            await anyio.sleep(delay)
            delay = min(0.1, delay * 2)
