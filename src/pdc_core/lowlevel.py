"""The public face for authors of new kinds of actor (as ``trio.lowlevel`` is trio's).

An actor nursery runs every actor through an :class:`ActorRunner`, and users hold it
through an :class:`ActorRef`. A new kind of actor (a remote one, a device-resident
one) implements both and registers the ``start_actor`` targets it serves with
:func:`runner_for`::

    from pdc_core.lowlevel import ActorRunner, StartOptions, runner_for

    @runner_for.register(MyTarget)
    def _(target: MyTarget, /, args: tuple, options: StartOptions) -> ActorRunner:
        return MyRunner(target, name=options.name)

After that, ``await nursery.start_actor(MyTarget(...))`` starts one, and the nursery's
lifetime, supervision and restart rules apply to it. Persistent kernels plug in this
way; the nursery imports none of their code. A :class:`Placement` does the same for
actors that run elsewhere (``start_actor(target, placement=...)``), e.g. in a Ray
worker process.

**The rules of a handle** (priorities, timeouts, cancellation, stop while asking,
empty batches) are :class:`ActorRef`'s: its public ``tell``, ``ask``, ``tell_many``,
``ask_many`` and ``ask_stream`` apply them, and a new kind of handle implements only
delivery (``_deliver``, ``_request``, optionally ``_deliver_many`` and
``_request_many``). For the extra methods of a kind (a kernel's ``ask_batch``, the
seed facade's ``send``) the same checks are here:

* :data:`DEFAULT_PRIORITY`, :func:`check_priority` and :func:`message_priority` (the
  default taken from the message);
* :func:`check_timeout` (``None``/``inf``: none, zero or negative: now, NaN refused)
  and :data:`TIMED_OUT`, what ``_request`` returns when its timeout passed;
* :func:`cancel_called` and :func:`raise_cancelled` (a per-message call raises the
  cancellation of an already-cancelled scope on entry), and
  :func:`cancellation_first`, the check a handle makes before it raises
  ``ActorStopped`` to a caller that is being cancelled;
* :func:`current_task`, the running task as a draining nursery's ``is_member``
  knows it.

:class:`pdc_core.testing.ActorRefConformance` checks a kind of handle against these
rules.

**The event-loop kit** (what pdc's own layers use, PyDotCompute's among them, and what
a new kind of actor or mailbox needs to run under asyncio and trio alike, as
``trio.lowlevel`` offers ``checkpoint`` and ``wait_task_rescheduled``):

* :func:`current_kit`, the running loop's :class:`Kit` (one per asyncio loop, one per
  thread running trio): ``kit.waiter()`` makes a :class:`Waiter` a task parks on,
  ``kit.arm(waiter, timeout)`` times it out to :data:`TIMED_OUT`, and
  ``await kit.checkpoint()`` yields; :func:`wake` and :func:`fail` resolve a waiter
  with a value or an error (False if it was already done); ``kit.task_host()`` and
  ``kit.cancel_scope()`` make the :class:`TaskHost` and :class:`IncarnationScope` an
  actor nursery runs its actors' tasks in;
* :func:`full_checkpoint`, trio's checkpoint on every path of an async call that is
  not a per-message path (raise a pending cancellation, yield, look again);
* the argument rules of pdc's API: :func:`strict_int` (the one integer rule: an int or
  anything with ``__index__``, never a bool, a float or a str) and :func:`check_count`
  (such an int, at least a minimum), :func:`check_duration` (a bound set once) and
  :func:`seconds_or_inf` (a checked timeout or bound as seconds to add to a clock),
  each error naming the argument;
* :func:`resolve_backend`: a ``backend=`` argument (a backend, its name, or ``None``
  for the default) as the backend itself.
"""

from ._actors._refs import (
    DEFAULT_PRIORITY,
    TIMED_OUT,
    ActorRef,
    ActorRunner,
    ActorState,
    ActorStatistics,
    Placement,
    StartOptions,
    cancel_called,
    cancellation_first,
    check_priority,
    check_timeout,
    current_task,
    message_priority,
    raise_cancelled,
    runner_for,
)
from ._loop import (
    IncarnationScope,
    Kit,
    TaskHost,
    Waiter,
    check_count,
    check_duration,
    current_kit,
    fail,
    full_checkpoint,
    seconds_or_inf,
    strict_int,
    wake,
)
from ._plugins import resolve_backend

__all__ = [
    "DEFAULT_PRIORITY",
    "TIMED_OUT",
    "ActorRef",
    "ActorRunner",
    "ActorState",
    "ActorStatistics",
    "IncarnationScope",
    "Kit",
    "Placement",
    "StartOptions",
    "TaskHost",
    "Waiter",
    "cancel_called",
    "cancellation_first",
    "check_count",
    "check_duration",
    "check_priority",
    "check_timeout",
    "current_kit",
    "current_task",
    "fail",
    "full_checkpoint",
    "message_priority",
    "raise_cancelled",
    "resolve_backend",
    "runner_for",
    "seconds_or_inf",
    "strict_int",
    "wake",
]
