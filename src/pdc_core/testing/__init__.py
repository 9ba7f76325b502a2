"""Test support for pdc and for third-party backends.

- :class:`BackendConformance`: the conformance suite; subclass it in your plugin's
  tests and set ``backend_name``.
- :class:`ActorRefConformance`: the conformance kit for a kind of actor handle (the
  rules of :class:`~pdc_core.ActorRef`); subclass it and say how to start an actor of
  your kind running an :class:`Echo` (messages: :class:`Message` by default).
- ``pdc_core.testing.pytest_plugin``: fixtures ``actor_nursery`` and
  ``ring_kernel_runtime`` for tests that anyio's pytest plugin runs
  (``@pytest.mark.anyio``); pytest loads it through its ``pytest11`` entry point.
- :func:`thread_count` and :func:`settle_threads`: check that stopping or cancelling
  left no thread behind (count before, wait for the count to come back after).

This package needs pytest: ``pip install 'pdc-core[testing]'``.
"""

from .._publish import publish
from ._conformance import BackendConformance
from ._handles import ActorRefConformance, Echo, Message
from ._threads import settle_threads, thread_count

__all__ = [
    "ActorRefConformance",
    "BackendConformance",
    "Echo",
    "Message",
    "settle_threads",
    "thread_count",
]

publish(__name__, globals(), __all__)
