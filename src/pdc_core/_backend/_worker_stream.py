"""Streams and events backed by a worker thread, for backends whose work runs on the host.

:class:`WorkerStream` is an in-order queue of callables run by one worker thread,
started on first use; :class:`WorkerEvent` is a marker in such a queue. The CPU
backend uses them as they are; a backend that must prepare its worker thread (the
metal backend opens an MLX stream there) overrides :meth:`WorkerStream.thread_context`.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any

from ._contract import Backend, Event, Stream

__all__ = [
    "ThreadContext",
    "Work",
    "WorkerEvent",
    "WorkerStream",
]

Work = Callable[[], None]
_WorkQueue = queue.SimpleQueue[Work | None]
_STOP = None

#: Made on the worker thread and entered around everything it runs.
ThreadContext = Callable[[], contextlib.AbstractContextManager[object]]


def _run_work_queue(work: _WorkQueue, context: ThreadContext) -> None:
    """Run queued callables in order, inside ``context()``, until the stop marker."""
    with context():
        while True:
            item = work.get()
            if item is _STOP:
                return
            item()
            del item  # hold no reference to the stream while waiting, so it can be collected


class WorkerStream(Stream):
    """An in-order queue of host work, run by one worker thread started on first use.

    Guarantees: items run in submission order, one at a time; :meth:`synchronize`
    returns once everything submitted before it has run and re-raises the first
    error raised by queued work; the worker thread ends when the stream is closed or
    garbage-collected.
    """

    #: The events this stream can wait for (subclasses narrow it to their own).
    event_type: type[WorkerEvent]

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self._work: _WorkQueue = queue.SimpleQueue()
        self._condition = threading.Condition()
        self._pending = 0
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._closed = False
        self._finalizer: weakref.finalize[Any, Any] | None = None

    @property
    def backend(self) -> Backend:
        return self._backend

    def thread_context(self) -> ThreadContext:
        """The extension hook: what the worker thread runs everything inside.

        Returns a callable that the worker thread calls once, when it starts; the
        context manager it returns is entered there around all the stream's work and
        exited when the stream is closed (or collected). The default does nothing. A
        backend whose work needs per-thread setup overrides it (the metal backend
        opens a dedicated MLX stream there). The callable must not refer to the
        stream (a bound method would), or the stream could never be collected.
        """
        return contextlib.nullcontext

    def enqueue(self, work: Work) -> None:
        """Queue ``work`` to run after everything queued before it."""
        with self._condition:
            if self._closed:
                raise RuntimeError(f"this {self._backend.name} stream is closed")
            self._pending += 1
            if self._thread is None:
                self._thread = threading.Thread(
                    target=_run_work_queue,
                    args=(self._work, self.thread_context()),
                    name=f"pdc-{self._backend.name}-stream",
                    daemon=True,
                )
                self._thread.start()
                self._finalizer = weakref.finalize(self, self._work.put, _STOP)
        self._work.put(lambda: self._run(work))

    def _run(self, work: Work) -> None:
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

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        return self._closed

    def synchronize(self) -> None:
        with self._condition:
            self._condition.wait_for(lambda: self._pending == 0)
            error, self._error = self._error, None
        if error is not None:
            raise error

    def wait_event(self, event: Event) -> None:
        if not isinstance(event, self.event_type):
            name = self._backend.name
            raise TypeError(f"a {name} stream can only wait for a {name} event, not {event!r}")
        self.enqueue(event.synchronize)

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

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{self._pending} pending"
        return f"<{type(self).__name__} on {self._backend.qualified_name}, {state}>"


class WorkerEvent(Event):
    """A marker in a :class:`WorkerStream`; an event never recorded counts as done."""

    #: The streams it can be recorded on, and their backend's name for messages.
    stream_type: type[WorkerStream] = WorkerStream
    kind = "worker"

    def __init__(self) -> None:
        self._reached = threading.Event()
        self._reached.set()

    def record(self, stream: Stream) -> None:
        if not isinstance(stream, self.stream_type):
            kind = self.kind
            raise TypeError(
                f"a {kind} event can only be recorded on a {kind} stream, not {stream!r}"
            )
        self._reached.clear()
        stream.enqueue(self._reached.set)

    @property
    def done(self) -> bool:
        return self._reached.is_set()

    def synchronize(self) -> None:
        self._reached.wait()


WorkerStream.event_type = WorkerEvent
