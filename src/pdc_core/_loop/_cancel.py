"""Whether the running task sits in a cancelled cancel scope, cheaply enough to ask on
every message.

A per-message call that completes without waiting (an actor's ``tell``, an ``ask``
answered by a hand-off) has no checkpoint of its own, so a task whose cancel scope is
already cancelled would complete it, and go on completing calls until its next wait.
The rule of pdc's handles (``ActorRef``'s public methods, the seed facade's ``send`` and
``receive``): such a call raises that cancellation on entry instead. The check must
cost a few per cent of a ``tell`` (about a microsecond), so each kit reads its
library's own state instead of asking ``anyio.current_effective_deadline()`` (1-2 us):

* asyncio (:func:`asyncio_cancel_called`): the calling task's anyio cancel scopes,
  innermost first, up to a shield; a task in no anyio scope is in no cancelled one.
* trio (``TrioKit.cancel_called``): the task's cancel status, whose
  ``effectively_cancelled`` flag trio keeps up to date (shields included) whenever a
  scope is cancelled.
"""

from __future__ import annotations

import math
import sys
import weakref
from asyncio import tasks as _asyncio_tasks
from collections.abc import Callable
from typing import Any

import anyio

__all__ = ["asyncio_cancel_called", "raise_cancelled"]

_ref = weakref.ref
#: asyncio's own {loop: running task}: what ``asyncio.current_task`` reads, without its
#: Python frame and its ``get_running_loop()`` (about 100 ns on 3.11).
_current_tasks: dict[object, object] = _asyncio_tasks._current_tasks  # type: ignore[attr-defined]
#: anyio's asyncio task states (``anyio._backends._asyncio._task_states.data``), found
#: once the backend is loaded.
_anyio_states: dict[Any, Any] | None = None
#: The last asyncio task asked about and its anyio state: a task sending many messages
#: is looked up once (a task's state object lives as long as the task). Holds that task
#: until another one asks.
_last_task: object = object()  # no task is this one
_last_state: Any = None


def asyncio_cancel_called(loop: object) -> Callable[[], bool]:
    """The check for asyncio ``loop``: whether its running task is in a cancelled anyio
    scope (a closure over the loop: one Python frame per call)."""
    tasks = _current_tasks

    def cancel_called() -> bool:
        global _anyio_states, _last_task, _last_state
        try:
            task = tasks[loop]  # a subscript, not .get(): ~10 ns less
        except KeyError:
            return False  # no task of this loop is running (a mailbox used elsewhere)
        if task is _last_task:
            state = _last_state
        else:
            states = _anyio_states
            if states is None:
                backend = sys.modules.get("anyio._backends._asyncio")
                if backend is None:
                    return False  # anyio never ran here: no anyio scope can be cancelled
                states = _anyio_states = backend._task_states.data
            state = states.get(_ref(task))
            if state is None:
                return False  # in no anyio scope yet (not cached: it may enter one)
            _last_task, _last_state = task, state
        scope = state.cancel_scope
        while scope is not None:
            if scope._cancel_called:
                return True
            if scope._shield:
                return False
            scope = scope._parent_scope
        return False

    return cancel_called


async def raise_cancelled() -> None:
    """Raise the calling task's pending cancellation (after ``cancel_called()`` said
    there is one); returns only if the scope was uncancelled meanwhile."""
    if anyio.current_effective_deadline() == -math.inf:
        await anyio.sleep_forever()
