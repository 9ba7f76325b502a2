"""Streams and events of the CPU backend: pdc's worker-thread streams, as they are."""

from __future__ import annotations

from collections.abc import Callable

from pdc_core.backend import WorkerEvent, WorkerStream


class CpuStream(WorkerStream):
    """An in-order queue of host work run by one worker thread (see :class:`WorkerStream`)."""

    def submit(self, work: Callable[[], None]) -> None:
        """Queue ``work`` to run after everything queued before it."""
        self.enqueue(work)


class CpuEvent(WorkerEvent):
    """A marker in a :class:`CpuStream`; an event never recorded counts as done."""

    stream_type = CpuStream
    kind = "cpu"


CpuStream.event_type = CpuEvent
