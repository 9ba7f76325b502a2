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
from asyncio import tasks as _asyncio_tasks
from collections.abc import Callable
from typing import Any

import anyio

__all__ = ["asyncio_cancel_called", "raise_cancelled"]

#: asyncio's own {loop: running task}: what ``asyncio.current_task`` reads, without its
#: Python frame and its ``get_running_loop()`` (about 100 ns on 3.11).
_current_tasks: dict[object, object] = _asyncio_tasks._current_tasks  # type: ignore[attr-defined]
#: How many tasks' anyio states one loop's check keeps at hand (then it starts afresh).
_CACHED_TASKS = 16


def _anyio_state(task: object) -> Any:
    """anyio's state of asyncio ``task`` (its innermost cancel scope), made now if anyio
    has none for it yet (a task anyio did not start, in no anyio scope so far), exactly
    as anyio's ``CancelScope.__enter__`` makes it (no parent id, no scope): the scopes
    the task enters later are then recorded in this object, which lives as long as the
    task. ``None`` when anyio's asyncio backend was never loaded (no anyio scope can be
    cancelled)."""
    backend = sys.modules.get("anyio._backends._asyncio")
    if backend is None:
        return None
    states = backend._task_states
    state = states.get(task)
    if state is None:
        state = states[task] = backend.TaskState(None, None)
    return state


def asyncio_cancel_called(loop: object) -> Callable[[], bool]:
    """The check for asyncio ``loop``: whether its running task is in a cancelled anyio
    scope (a closure over the loop: one Python frame per call).

    Each task's anyio state is looked up once (a weak-keyed lookup, ~0.1-0.5 us, was
    paid on every call of a task other than the last one: every call of a seed-facade
    round trip, which alternates between the caller and the kernel): the loop's check
    keeps the last task's, and up to ``_CACHED_TASKS`` tasks' in a dict (strong
    references to those tasks until it is cleared; the cache is the loop's, used by the
    loop's thread only).
    """
    cache: dict[object, Any] = {}
    #: [last task, its state]: one object, where two closure cells would be two.
    last: list[Any] = [None, None]

    # Everything it reads comes in as a default (one tuple) rather than from closure
    # cells (one object each): after the loop's other work (a seed-facade round trip
    # alternates tasks, with a poll of the selector between), each object touched is a
    # likely cache miss, and this check is a few of them.
    def cancel_called(
        tasks: dict[object, object] = _current_tasks,
        loop: object = loop,
        last: list[Any] = last,
        cache: dict[object, Any] = cache,
    ) -> bool:
        try:
            task = tasks[loop]  # a subscript, not .get(): ~10 ns less
        except KeyError:
            return False  # no task of this loop is running (a mailbox used elsewhere)
        if task is last[0]:
            state = last[1]
        else:
            state = cache.get(task)
            if state is None:
                state = _anyio_state(task)
                if state is None:
                    return False  # anyio never ran here: no anyio scope can be cancelled
                if len(cache) >= _CACHED_TASKS:
                    cache.clear()
                cache[task] = state
            last[0] = task
            last[1] = state
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
