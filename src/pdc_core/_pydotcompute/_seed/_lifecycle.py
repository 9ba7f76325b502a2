"""The ring kernels' lifecycle: states, which operations each allows, and terminate.

Shared by kernel functions (:mod:`._ring_kernel`) and persistent kernels in the facade
(:mod:`._persistent_runtime`), so neither imports the other.
"""

# ruff: noqa: ASYNC109

from __future__ import annotations

import enum
from typing import Final, Protocol

import anyio

from ...lowlevel import ActorState

__all__ = [
    "AS_ACTOR_STATE",
    "FINAL_STATES",
    "RECEIVE_STATES",
    "KernelState",
    "Terminable",
    "terminate_within",
]


class KernelState(enum.Enum):
    """Lifecycle state of a ring kernel (see the module documentation).

    CREATED is the state of a free-standing kernel before its ``launch()``
    (PyDotCompute's ``RingKernel(id, func)``, on ``pdc_core.ring_kernels.lifecycle``);
    a kernel ``runtime.launch`` returns starts LAUNCHED.

    A state also compares equal to the :class:`~pdc_core.ActorState` it is in actor
    terms (CREATED is STARTING, LAUNCHED and DEACTIVATED are PAUSED, ACTIVE is
    RUNNING, TERMINATING is STOPPING, TERMINATED is STOPPED, FAILED is CRASHED), so
    PyDotCompute's ``kernel.state == KernelState.LAUNCHED`` holds on the actor state a
    kernel's ``state`` reports. It is as exact as the actor state: a DEACTIVATED kernel's
    ``state`` equals ``KernelState.LAUNCHED`` too; ``kernel.kernel_state`` (and
    ``runtime.get_kernel_state``) tell the two apart. Two kernel states are equal only
    when they are the same.
    """

    CREATED = "created"
    LAUNCHED = "launched"
    ACTIVE = "active"
    DEACTIVATED = "deactivated"
    TERMINATING = "terminating"
    TERMINATED = "terminated"
    FAILED = "failed"

    @property
    def actor_state(self) -> ActorState:
        """This state in actor terms (what a kernel's ``state`` reports)."""
        return _ACTOR_STATES[self.name]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ActorState):
            return _ACTOR_STATES[self.name] is other
        return self is other

    def __hash__(self) -> int:
        # Equal to its actor state, so hashed as it is (KernelState keys still work:
        # the states sharing an actor state are unequal to each other).
        return hash(_ACTOR_STATES[self.name])


# By name: KernelState's hash reads this, so it cannot be keyed by KernelState.
_ACTOR_STATES: Final = {
    "CREATED": ActorState.STARTING,
    "LAUNCHED": ActorState.PAUSED,
    "ACTIVE": ActorState.RUNNING,
    "DEACTIVATED": ActorState.PAUSED,
    "TERMINATING": ActorState.STOPPING,
    "TERMINATED": ActorState.STOPPED,
    "FAILED": ActorState.CRASHED,
}
RECEIVE_STATES: Final = "LAUNCHED, ACTIVE, DEACTIVATED, TERMINATING"
FINAL_STATES: Final = frozenset({KernelState.TERMINATED, KernelState.FAILED})
AS_ACTOR_STATE: Final = {state: state.actor_state for state in KernelState}


class Terminable(Protocol):
    """What :func:`terminate_within` needs of a launched kernel."""

    @property
    def _finished(self) -> bool: ...

    def _request_terminate(self, timeout: float) -> None: ...

    def _force_terminate(self) -> None: ...

    async def wait(self) -> None: ...


async def terminate_within(kernel: Terminable, timeout: float) -> None:
    """Ask ``kernel`` to drain and stop; force it after ``timeout`` seconds; wait for it."""
    if kernel._finished:
        return
    kernel._request_terminate(timeout)
    with anyio.move_on_after(timeout):
        await kernel.wait()
    if not kernel._finished:
        kernel._force_terminate()
        await kernel.wait()
