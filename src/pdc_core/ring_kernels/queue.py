"""PyDotCompute's import path ``pydotcompute.ring_kernels.queue``: a queue over pdc's mailbox.

A thin layer for code written for PyDotCompute: :class:`MessageQueue` is a
:class:`~pdc_core.Mailbox` behind PyDotCompute's method names (``put``/``get`` with a
``timeout=``, ``put_nowait``/``get_nowait`` returning ``False``/``None``, ``qsize``,
``get_stats()``), so it has the mailbox's guarantees: bounded, priorities 0-255 (higher
first, FIFO within one), every drop counted, asyncio and trio. ``use_priority=False``
sends every message at one priority, which makes the queue FIFO; ``maxsize=0`` makes
it unbounded. :class:`BackpressureStrategy`'s members carry pdc's policy as their
value (``REJECT`` is :attr:`Backpressure.RAISE <pdc_core.Backpressure.RAISE>`). Unlike
PyDotCompute's, ``DROP_OLDEST`` evicts the oldest message of the lowest priority queued
(PyDotCompute's dropped the highest). New code uses :class:`~pdc_core.Mailbox`.
"""

from .._publish import publish
from .._pydotcompute.ring_kernels.queue import (
    BackpressureStrategy,
    MessageQueue,
)

__all__ = [
    "BackpressureStrategy",
    "MessageQueue",
]

publish(__name__, globals(), __all__)
