"""Test helpers for pdc-ray: :class:`FakeEngine`, an in-process stand-in for Ray.

The fake engine runs each remote actor's host in the test's own event loop (asyncio
or trio), as a "process" of its own that can die. It is adversarial where Ray is:

* calls complete in a scrambled order (each waits a random number of scheduler
  turns, seeded, before it runs), as Ray's async actors reorder calls;
* arguments and results go through ``pickle``, so what does not pickle fails as it
  would on the wire (a :class:`TypeError` naming it);
* a placement asking for more than ``resources`` holds is never scheduled;

and it injects faults on demand: :meth:`FakeEngine.lose` (the process dies),
:meth:`FakeEngine.hang` (the process stops answering, heartbeats included),
``kill_delay`` (Ray takes that long to report a killed process dead; ``math.inf``:
never), ``fail_create`` (creating a process raises) and :meth:`FakeEngine.hold` (calls
of one method wait until released). :meth:`FakeEngine.alive` says what is left.

Use it as an async context manager around the nursery::

    async with FakeEngine() as engine, open_nursery() as nursery:
        ref = await nursery.start_actor(Echo, placement=pdc_ray.on(engine=engine))
"""

from __future__ import annotations

import math
import pickle
import random
from collections import Counter
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel

from ._engine import Engine, PendingCall, PlacementSpec
from ._errors import RemoteActorLost
from ._host import Host, host_for
from ._wire import HostSpec, Location, sendable_outcome

__all__ = ["FakeEngine", "FakeProcess"]


class _Call(PendingCall):
    """A call of a fake process: done once answered, or failed by the process's death."""

    __slots__ = ("call_back", "callbacks", "done", "error", "value")

    def __init__(self, call_back: bool = True) -> None:
        self.call_back = call_back
        self.done = anyio.Event()
        self.value: Any = None
        self.error: BaseException | None = None
        self.callbacks: list[Callable[[], object]] = []

    def answer(self, process: FakeProcess) -> None:
        process.pending.discard(self)
        self.finish()

    def finish(self) -> None:
        """Done: wake the waiters and run the callbacks (as Ray runs them: once each)."""
        self.done.set()
        callbacks, self.callbacks = self.callbacks, []
        for callback in callbacks:
            callback()

    async def result(self) -> Any:
        await self.done.wait()
        return self.result_nowait()

    def add_done_callback(self, callback: Callable[[], object]) -> bool:
        if not self.call_back:
            return False
        if self.done.is_set():
            callback()
        else:
            self.callbacks.append(callback)
        return True

    def result_nowait(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


class FakeProcess:
    """One host "process" of a :class:`FakeEngine` (the engine's actor handle)."""

    def __init__(self, index: int, spec: HostSpec, placement: PlacementSpec, scheduled: bool):
        self.index = index
        self.spec = spec
        self.placement = placement
        #: Whether the placement could be satisfied (else it waits until killed).
        self.scheduled = scheduled
        self.host: Host | None = None
        self.up = anyio.Event()
        self.dead = anyio.Event()
        self.killed = False
        self.hung = False
        self.tg: anyio.abc.TaskGroup | None = None
        self.pending: set[_Call] = set()
        gpus = int(placement.num_gpus or 0)
        self.location = Location(
            node_id="fake-node",
            node_ip="127.0.0.1",
            pid=10_000 + index,
            gpu_ids=tuple(str(i) for i in range(gpus)),
            actor_ref_id=f"fake-{index}",
        )

    @property
    def alive(self) -> bool:
        """Whether the process has not died yet."""
        return not self.dead.is_set()

    def die(self, why: str) -> None:
        """End the process now: its tasks are cancelled, pending calls fail."""
        if self.dead.is_set():
            return
        self.dead.set()
        self.up.set()  # wakes calls waiting for a start that will never come
        for call in list(self.pending):
            call.error = RemoteActorLost(f"fake process {self.index} ({self.spec.actor_id}) {why}")
            call.finish()
        self.pending.clear()
        if self.tg is not None:
            self.tg.cancel_scope.cancel()

    def __repr__(self) -> str:
        state = "dead" if self.dead.is_set() else ("up" if self.up.is_set() else "pending")
        return f"<FakeProcess {self.index} {self.spec.actor_id!r} {state}>"


def _roundtrip(value: Any, what: str) -> Any:
    try:
        return pickle.loads(pickle.dumps(value))
    except Exception as exc:
        raise TypeError(f"{what} does not pickle: {type(exc).__name__}: {exc}") from exc


class FakeEngine(Engine):
    """An in-process :class:`~pdc_ray.Engine` that reorders calls and injects faults.

    ``seed`` makes the reordering reproducible; ``reorder`` is the most scheduler turns
    a call waits before it runs (0: calls run in the order they were made);
    ``resources`` the amounts a placement may take (``"CPU"``, ``"GPU"`` and custom
    names; unlimited when ``None``); ``kill_delay`` the seconds before a killed process
    is reported dead (``math.inf``: never); ``fail_create`` an exception that
    :meth:`create` raises; ``call_back`` whether its pending calls take done callbacks
    (:meth:`~pdc_ray.PendingCall.add_done_callback`, as Ray's do; ``False``: an engine
    that cannot, whose calls are only awaited).
    """

    name = "fake"

    def __init__(
        self,
        *,
        seed: int = 0,
        reorder: int = 8,
        resources: Mapping[str, float] | None = None,
        serialize: bool = True,
        kill_delay: float = 0.0,
        fail_create: BaseException | None = None,
        call_back: bool = True,
    ) -> None:
        self._random = random.Random(seed)
        self.reorder = reorder
        self._free: dict[str, float] | None = None if resources is None else dict(resources)
        self.serialize = serialize
        self.kill_delay = kill_delay
        self.fail_create = fail_create
        self.call_back = call_back
        #: Every process created, in order.
        self.processes: list[FakeProcess] = []
        #: How many calls of each host method were made.
        self.calls: Counter[str] = Counter()
        self._held: dict[str, anyio.Event] = {}
        self._tg: anyio.abc.TaskGroup | None = None

    async def __aenter__(self) -> FakeEngine:
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._tg is not None
        for process in self.processes:
            process.die("was ended with its engine")
        self._tg.cancel_scope.cancel()
        return await self._tg.__aexit__(exc_type, exc, tb)

    # -- observing and injecting faults -------------------------------------------------

    def alive(self) -> list[FakeProcess]:
        """The processes that have not died."""
        return [process for process in self.processes if process.alive]

    def lose(self, process: FakeProcess | None = None) -> None:
        """The process (default: the last created) dies, as a crashed worker or node."""
        (process or self.processes[-1]).die("was lost")

    def hang(self, process: FakeProcess | None = None) -> None:
        """The process stops answering any call (heartbeats included) until killed."""
        (process or self.processes[-1]).hung = True

    def hold(self, method: str) -> None:
        """Calls of ``method`` made from now on wait until :meth:`release`."""
        self._held.setdefault(method, anyio.Event())

    def release(self, method: str) -> None:
        """Let the held calls of ``method`` run."""
        event = self._held.pop(method, None)
        if event is not None:
            event.set()

    # -- the engine ---------------------------------------------------------------------

    def _fits(self, placement: PlacementSpec) -> bool:
        free = self._free
        if free is None:
            return True
        wanted = dict(placement.resources)
        wanted["CPU"] = placement.num_cpus if placement.num_cpus is not None else 0.0
        wanted["GPU"] = placement.num_gpus or 0.0
        if any(amount > free.get(name, 0.0) for name, amount in wanted.items() if amount):
            return False
        for name, amount in wanted.items():
            if amount:
                free[name] = free.get(name, 0.0) - amount
        return True

    async def create(self, spec: HostSpec, placement: PlacementSpec) -> FakeProcess:
        """Start a fake process running the host in the engine's task group.

        Raises :class:`RuntimeError` outside ``async with``, ``fail_create`` when set,
        and (with ``serialize``) :class:`TypeError` for a spec that does not pickle. A
        checkpoint before anything is created: cancelled, it creates nothing.
        """
        if self._tg is None:
            raise RuntimeError("a FakeEngine must be entered (async with FakeEngine() ...)")
        await anyio.lowlevel.checkpoint()
        if self.fail_create is not None:
            raise self.fail_create
        if self.serialize:
            spec = _roundtrip(spec, f"actor {spec.actor_id!r} (its target or arguments)")
        process = FakeProcess(len(self.processes), spec, placement, self._fits(placement))
        self.processes.append(process)
        self._tg.start_soon(self._run_process, process)
        return process

    async def _run_process(self, process: FakeProcess) -> None:
        if not process.scheduled:
            await process.dead.wait()
            return
        try:
            async with anyio.create_task_group() as tg:
                process.tg = tg
                process.host = host_for(process.spec, lambda: process.location)
                process.up.set()
                await process.dead.wait()
                tg.cancel_scope.cancel()
        finally:
            if self._free is not None:
                placement = process.placement
                for name, amount in (
                    *placement.resources.items(),
                    ("CPU", placement.num_cpus or 0.0),
                    ("GPU", placement.num_gpus or 0.0),
                ):
                    if amount:
                        self._free[name] = self._free.get(name, 0.0) + amount

    def submit(self, actor: object, method: str, *args: Any, control: bool = False) -> PendingCall:
        process = self._process(actor)
        self.calls[method] += 1
        if self.serialize:
            args = _roundtrip(args, f"the arguments of {method}()")
        if process.dead.is_set():
            raise RemoteActorLost(f"fake process {process.index} ({process.spec.actor_id}) is dead")
        call = _Call(self.call_back)
        process.pending.add(call)
        assert self._tg is not None
        self._tg.start_soon(self._execute, process, method, args, call)
        return call

    async def _execute(
        self, process: FakeProcess, method: str, args: tuple[Any, ...], call: _Call
    ) -> None:
        held = self._held.get(method)
        if held is not None:
            await held.wait()
        for _ in range(self._random.randrange(self.reorder + 1)):
            await anyio.lowlevel.checkpoint()
        if process.dead.is_set():
            return
        await process.up.wait()
        if process.hung or process.dead.is_set():
            return  # a hung process answers nothing; a dead one failed the call
        assert process.tg is not None
        # Run inside the process: its death cancels the call, like a dead worker.
        process.tg.start_soon(self._in_process, process, method, args, call)

    async def _in_process(
        self, process: FakeProcess, method: str, args: tuple[Any, ...], call: _Call
    ) -> None:
        host = process.host
        assert host is not None
        assert process.tg is not None
        if method == "start":
            args = (process.tg.start_soon,)
        try:
            value = await getattr(host, method)(*args)
            if self.serialize:
                what = f"the result of {method}()"
                if method == "deliver":  # as the Ray engine: a reply that does not pickle
                    value = sendable_outcome(value, lambda v: _roundtrip(v, what))
                else:
                    value = _roundtrip(value, what)
        except Exception as exc:
            call.error = exc
        else:
            call.value = value
        if process.hung:
            await process.dead.wait()  # a hung process answers nothing
            return
        call.answer(process)

    async def kill(self, actor: object) -> None:
        """Kill the fake process and wait until it is reported dead (after
        ``kill_delay``; never with ``math.inf``). The kill is made at once; cancelling
        it abandons only the wait."""
        process = self._process(actor)
        process.killed = True
        if self.kill_delay <= 0:
            process.die("was killed")
        elif math.isfinite(self.kill_delay):
            assert self._tg is not None
            self._tg.start_soon(self._die_later, process, self.kill_delay)
        await process.dead.wait()

    @staticmethod
    async def _die_later(process: FakeProcess, delay: float) -> None:
        await anyio.sleep(delay)
        process.die("was killed")

    def _process(self, actor: object) -> FakeProcess:
        if not isinstance(actor, FakeProcess) or actor not in self.processes:
            raise TypeError(f"{actor!r} is not a process of {self!r}")
        return actor
