"""The ring kernels' lifecycle: states, which operations each allows, and terminate.

Shared by kernel functions (:mod:`._ring_kernel`) and persistent kernels in the facade
(:mod:`._persistent_runtime`), so neither imports the other.
"""

# ruff: noqa: ASYNC109

from __future__ import annotations

import enum
from typing import Final, Protocol

import anyio

from .._actors import ActorState

__all__ = [
    "AS_ACTOR_STATE",
    "FINAL_STATES",
    "RECEIVE_STATES",
    "KernelState",
    "Terminable",
    "terminate_within",
]


class KernelState(enum.Enum):
    """Lifecycle state of a ring kernel (see the module documentation)."""

    LAUNCHED = "launched"
    ACTIVE = "active"
    DEACTIVATED = "deactivated"
    TERMINATING = "terminating"
    TERMINATED = "terminated"
    FAILED = "failed"


RECEIVE_STATES: Final = "LAUNCHED, ACTIVE, DEACTIVATED, TERMINATING"
FINAL_STATES: Final = frozenset({KernelState.TERMINATED, KernelState.FAILED})
AS_ACTOR_STATE: Final = {
    KernelState.LAUNCHED: ActorState.PAUSED,
    KernelState.ACTIVE: ActorState.RUNNING,
    KernelState.DEACTIVATED: ActorState.PAUSED,
    KernelState.TERMINATING: ActorState.STOPPING,
    KernelState.TERMINATED: ActorState.STOPPED,
    KernelState.FAILED: ActorState.CRASHED,
}


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
