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

__all__ = [
    "DEFAULT_PRIORITY",
    "TIMED_OUT",
    "ActorRef",
    "ActorRunner",
    "ActorState",
    "ActorStatistics",
    "Placement",
    "StartOptions",
    "cancel_called",
    "cancellation_first",
    "check_priority",
    "check_timeout",
    "current_task",
    "message_priority",
    "raise_cancelled",
    "runner_for",
]
