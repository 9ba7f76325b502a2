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
worker process. :func:`cancellation_first` is the check
a handle makes before it raises ``ActorStopped`` to a caller that is being cancelled.
"""

from ._actors import (
    ActorRef,
    ActorRunner,
    ActorState,
    ActorStatistics,
    Placement,
    StartOptions,
    cancellation_first,
    runner_for,
)

__all__ = [
    "ActorRef",
    "ActorRunner",
    "ActorState",
    "ActorStatistics",
    "Placement",
    "StartOptions",
    "cancellation_first",
    "runner_for",
]
