"""The engine seam: the few things a remote runner asks of whatever runs processes.

A :class:`~pdc_ray.RemoteRunner` never talks to Ray directly. It asks an
:class:`Engine` to create a host process for one actor, call the host's methods,
watch it, locate it and kill it. :class:`pdc_ray.RayEngine` does that with Ray;
:class:`pdc_ray.testing.FakeEngine` does it in-process, reordering calls and
injecting crashes, losses, hangs and slow kills, so the runner's supervision and
ordering logic is tested without Ray.

The host methods an engine must expose (all ``async``, see ``pdc_ray._host.Host``):
``start``, ``deliver`` (data calls), and ``cancel``, ``stop``, ``pause``, ``resume``,
``statistics``, ``ping``, ``watch``, ``locate`` (control calls, which must never queue
behind data calls).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ._wire import Failure, HostSpec, Location

__all__ = ["Engine", "PendingCall", "PlacementSpec"]


@dataclass(frozen=True, slots=True)
class PlacementSpec:
    """The resources and scheduling an engine is asked for (see :func:`pdc_ray.on`)."""

    num_cpus: float | None = None
    num_gpus: float | None = None
    resources: Mapping[str, float] = field(default_factory=dict)
    node: str | None = None
    runtime_env: Mapping[str, Any] | None = None
    placement_group: Any = None
    bundle_index: int = -1


class PendingCall(ABC):
    """A host method call an :class:`Engine` has sent (see :meth:`Engine.submit`)."""

    __slots__ = ()

    @abstractmethod
    async def result(self) -> Any:
        """Wait for the call's result and return it (or raise what :meth:`Engine.call`
        raises). Any task may wait, and a wait that was cancelled may be taken up again
        by another task: the call itself goes on."""

    def add_done_callback(self, callback: Callable[[], object]) -> bool:
        """Arrange for ``callback()`` to be called once, from any thread, when the
        result is ready (at once if it is); return False when this call cannot (the
        default: then wait with :meth:`result`). The callback must be quick and
        thread-safe; after it, :meth:`result_nowait` returns the result. This lets a
        runner wait for many calls with no task per call."""
        return False

    def result_nowait(self) -> Any:
        """The result of a call that is done (see :meth:`add_done_callback`), returned
        or raised as :meth:`result` would."""
        raise NotImplementedError(f"{type(self).__name__} does not call back")


class Engine(ABC):
    """What runs the host processes of remote actors (the seam between pdc and Ray).

    Contract, which the runner relies on:

    * :meth:`create` returns a handle at once or soon; it does not wait for the
      process to be scheduled (a placement nobody can satisfy makes the first
      :meth:`call` wait, which the runner bounds by its start timeout). Cancelling it
      leaves nothing behind.
    * :meth:`submit` sends a call of a host method at once, without waiting, and
      returns its :class:`PendingCall`; it raises :class:`TypeError` when the
      arguments cannot be sent (and may raise :class:`~pdc_ray.RemoteActorLost` for a
      host known to be gone). :meth:`call` is ``submit`` and waiting for the result.
      A result raises :class:`~pdc_ray.RemoteActorLost` once the host process is
      gone, including for calls in flight when it died; it never hangs on a dead
      process. Calls may complete in any order; ``control=True`` calls run in their
      own concurrency group, never queued behind data calls. Cancelling a wait
      abandons the wait, not the call (the engine keeps no callback into the
      waiter's event loop).
    * :meth:`kill` kills the process, whatever it is doing, and returns once the
      engine reports it dead (the runner bounds the wait by its kill timeout).
    * :meth:`watch` returns the host's outcome once the hosted actor has ended,
      ``(code, failure)``, or raises :class:`~pdc_ray.RemoteActorLost`.
    * :meth:`locate` says where the host runs.
    """

    #: A short name for messages and ``repr``.
    name: str = "engine"

    @abstractmethod
    async def create(self, spec: HostSpec, placement: PlacementSpec) -> object:
        """Create the host process of one actor and return the engine's handle.

        Does not wait for the process to be scheduled. Cancelling it must leave
        nothing behind (no process created, or the one created killed).
        """

    @abstractmethod
    def submit(self, actor: object, method: str, *args: Any, control: bool = False) -> PendingCall:
        """Send a call of ``method`` of the host with ``args``; return it, pending."""

    async def call(self, actor: object, method: str, *args: Any, control: bool = False) -> Any:
        """Call ``method`` of the host with ``args`` and return its result.

        :meth:`submit`, then the call's result: raises what the method raised,
        :class:`TypeError` for arguments that cannot be sent and
        :class:`~pdc_ray.RemoteActorLost` once the host is gone. Cancelling it abandons
        the wait, not the call.
        """
        return await self.submit(actor, method, *args, control=control).result()

    @abstractmethod
    async def kill(self, actor: object) -> None:
        """Kill the host process; return once the engine reports it dead.

        The kill is sent before the wait: cancelling it abandons only the wait for
        the engine's report (the runner bounds that wait by its kill timeout).
        """

    async def watch(self, actor: object) -> tuple[int, Failure | None]:
        """Return once the hosted actor has ended: its outcome ``(code, failure)``.

        Raises :class:`~pdc_ray.RemoteActorLost` if the host is gone. Cancelling it
        abandons the wait, not the host's ``watch`` call.
        """
        outcome: tuple[int, Failure | None] = await self.call(actor, "watch", control=True)
        return outcome

    async def locate(self, actor: object) -> Location:
        """Return where the host runs.

        Raises :class:`~pdc_ray.RemoteActorLost` if the host is gone. Cancelling it
        abandons the wait only.
        """
        location: Location = await self.call(actor, "locate", control=True)
        return location

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"
