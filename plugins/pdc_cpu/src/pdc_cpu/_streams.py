"""Streams and events of the CPU backend: in-order work queues run by worker threads."""

from __future__ import annotations

import queue
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pdc_core import Event, Stream

if TYPE_CHECKING:
    from ._backend import CpuBackend

_STOP = None


def _run_queue(work: queue.SimpleQueue[Callable[[], None] | None]) -> None:
    while True:
        item = work.get()
        if item is _STOP:
            return
        item()
        del item  # hold no reference to the stream while waiting, so it can be collected


class CpuStream(Stream):
    """An in-order queue of host work, run by one worker thread started on first use.

    Guarantees: items run in submission order, one at a time; :meth:`synchronize`
    returns once everything submitted before it has run and re-raises the first
    error raised by queued work; the worker thread ends when the stream is closed or
    garbage-collected.
    """

    def __init__(self, backend: CpuBackend) -> None:
        self._backend = backend
        self._work: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._condition = threading.Condition()
        self._pending = 0
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._closed = False
        self._finalizer: weakref.finalize[Any, Any] | None = None

    @property
    def backend(self) -> CpuBackend:
        return self._backend

    def submit(self, work: Callable[[], None]) -> None:
        """Queue ``work`` to run after everything queued before it."""
        with self._condition:
            if self._closed:
                raise RuntimeError("this stream is closed")
            self._pending += 1
            if self._thread is None:
                self._thread = threading.Thread(
                    target=_run_queue, args=(self._work,), name="pdc-cpu-stream", daemon=True
                )
                self._thread.start()
                self._finalizer = weakref.finalize(self, self._work.put, _STOP)
        self._work.put(lambda: self._run(work))

    def _run(self, work: Callable[[], None]) -> None:
        try:
            work()
        except BaseException as exc:
            with self._condition:
                if self._error is None:
                    self._error = exc
        finally:
            with self._condition:
                self._pending -= 1
                self._condition.notify_all()

    @property
    def done(self) -> bool:
        return self._pending == 0

    def synchronize(self) -> None:
        with self._condition:
            self._condition.wait_for(lambda: self._pending == 0)
            error, self._error = self._error, None
        if error is not None:
            raise error

    def wait_event(self, event: Event) -> None:
        if not isinstance(event, CpuEvent):
            raise TypeError(f"a cpu stream can only wait for a cpu event, not {event!r}")
        self.submit(event.synchronize)

    def close(self) -> None:
        """Wait for queued work, then stop the worker thread."""
        with self._condition:
            if self._closed:
                return
            self._condition.wait_for(lambda: self._pending == 0)
            self._closed = True
            thread = self._thread
        if self._finalizer is not None:
            self._finalizer()
        if thread is not None:
            thread.join()


class CpuEvent(Event):
    """A marker in a :class:`CpuStream`; an event never recorded counts as done."""

    def __init__(self) -> None:
        self._reached = threading.Event()
        self._reached.set()

    def record(self, stream: Stream) -> None:
        if not isinstance(stream, CpuStream):
            raise TypeError(f"a cpu event can only be recorded on a cpu stream, not {stream!r}")
        self._reached.clear()
        stream.submit(self._reached.set)

    @property
    def done(self) -> bool:
        return self._reached.is_set()

    def synchronize(self) -> None:
        self._reached.wait()
