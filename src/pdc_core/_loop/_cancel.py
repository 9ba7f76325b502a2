"""Whether the running task sits in a cancelled cancel scope, cheaply enough to ask on
every message.

A per-message call that completes without waiting (an actor's ``tell``, an ``ask``
answered by a hand-off) has no checkpoint of its own, so a task whose cancel scope is
already cancelled would complete it, and go on completing calls until its next wait.
The rule of pdc's handles (``ActorRef``'s public methods, the seed facade's ``send`` and
``receive``): such a call raises that cancellation on entry instead. The check must
cost a few per cent of a ``tell`` (about a microsecond), so it reads each library's
own state instead of asking ``anyio.current_effective_deadline()`` (1-2 us):

* asyncio: the calling task's anyio cancel scopes, innermost first, up to a shield;
  a task in no anyio scope is in no cancelled one.
* trio: the task's cancel status, whose ``effectively_cancelled`` flag trio keeps
  up to date (shields included) whenever a scope is cancelled.
"""

from __future__ import annotations

import math
import sys
import weakref
from asyncio import current_task as _asyncio_current_task
from asyncio.events import _get_running_loop
from typing import Any

import anyio

__all__ = ["cancel_called", "raise_if_cancelled", "raise_cancelled"]

_ref = weakref.ref
#: anyio's asyncio task states (``anyio._backends._asyncio._task_states.data``), found
#: once the backend is loaded.
_anyio_states: dict[Any, Any] | None = None
#: trio.lowlevel.current_task, once trio runs.
_trio_current_task: Any = None


def _asyncio_cancel_called(loop: object) -> bool:
    global _anyio_states
    states = _anyio_states
    if states is None:
        backend = sys.modules.get("anyio._backends._asyncio")
        if backend is None:
            return False  # anyio never ran here: no anyio scope can be cancelled
        states = _anyio_states = backend._task_states.data
    state = states.get(_ref(_asyncio_current_task(loop)))  # type: ignore[arg-type]
    if state is None:
        return False
    scope = state.cancel_scope
    while scope is not None:
        if scope._cancel_called:
            return True
        if scope._shield:
            return False
        scope = scope._parent_scope
    return False


def _trio_cancel_called() -> bool:
    global _trio_current_task
    current = _trio_current_task
    if current is None:
        trio = sys.modules.get("trio")
        if trio is None:
            raise RuntimeError("pdc runs under asyncio or trio, and neither is running here")
        current = _trio_current_task = trio.lowlevel.current_task
    status = current()._cancel_status
    try:
        return bool(status.effectively_cancelled)
    except AttributeError:  # pragma: no cover - a trio without the flag: the slow way
        return bool(anyio.current_effective_deadline() == -math.inf)


def cancel_called() -> bool:
    """Whether the calling task is in a cancel scope that has been cancelled (and not
    shielded from it), so that its next checkpoint raises the cancellation."""
    loop = _get_running_loop()
    if loop is not None:
        return _asyncio_cancel_called(loop)
    return _trio_cancel_called()


async def raise_cancelled() -> None:
    """Raise the calling task's pending cancellation (it must have one, see
    :func:`cancel_called`); returns only if the scope was uncancelled meanwhile."""
    if anyio.current_effective_deadline() == -math.inf:
        await anyio.sleep_forever()


async def raise_if_cancelled() -> None:
    """Raise the calling task's cancellation if its scope is already cancelled; else
    return at once, without yielding (not a checkpoint)."""
    if cancel_called():
        await raise_cancelled()
