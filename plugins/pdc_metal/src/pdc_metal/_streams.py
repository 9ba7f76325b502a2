"""Streams and events of the metal backend.

MLX streams belong to the thread that created them (``mx.new_stream``: "can only be
used on the thread where it was created"), and an unevaluated MLX array can only be
evaluated on a thread that has the streams its graph was built on. So a
:class:`MetalStream` is an in-order work queue run by one worker thread that owns a
dedicated MLX stream: work runs there under ``mx.stream(...)``, and every MLX array it
returns is evaluated there before the work counts as done. That is the one place
lazy evaluation is forced, which gives the guarantee the rest relies on: once a
stream (or an event recorded after the work) is done, the results are in memory and
a host read sees them.
"""

from __future__ import annotations

import queue
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from pdc_core import Event, Stream

if TYPE_CHECKING:
    from ._backend import MetalBackend

__all__ = ["MetalEvent", "MetalStream"]

_Work = Callable[[], None]
_STOP = None


def _worker(work: queue.SimpleQueue[_Work | None], device: Any) -> None:
    import mlx.core as mx

    mlx_stream = mx.new_stream(device)
    with mx.stream(mlx_stream):
        while True:
            item = work.get()
            if item is _STOP:
                break
            item()
            del item  # holds the stream: keep it collectable while the worker waits
    mx.synchronize(mlx_stream)


def evaluate(result: Any) -> Any:
    """Evaluate every MLX array in ``result`` (an array or a tree of them) and return it."""
    import mlx.core as mx

    mx.eval(result)
    return result


class MetalStream(Stream):
    """An in-order queue of MLX work on a dedicated MLX stream, run by a worker thread.

    Guarantees: items run in submission order, one at a time, on this stream's own
    MLX stream; the MLX arrays an item returns are evaluated before the next item
    starts, so :meth:`synchronize` (or :attr:`done`) means "results are in memory";
    :meth:`synchronize` re-raises the first error of queued work; the worker thread
    ends when the stream is closed or garbage-collected.
    """

    def __init__(self, backend: MetalBackend) -> None:
        self._backend = backend
        self._work: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        self._condition = threading.Condition()
        self._pending = 0
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._closed = False
        self._finalizer: weakref.finalize[..., MetalStream] | None = None

    @property
    def backend(self) -> MetalBackend:
        return self._backend

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future[Any]:
        """Queue ``fn(*args, **kwargs)``; the future holds its evaluated result.

        Arguments that are MLX arrays must already be evaluated (or built on this
        stream): MLX cannot evaluate, on the worker thread, a graph built on another
        thread's default stream. :meth:`MetalBackend.submit` takes care of that.
        An error fails the future and is also re-raised by :meth:`synchronize`.
        """
        future: Future[Any] = Future()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(evaluate(fn(*args, **kwargs)))
            except BaseException as exc:
                future.set_exception(exc)
                raise

        self._enqueue(run)
        return future

    def _enqueue(self, work: _Work) -> None:
        with self._condition:
            if self._closed:
                raise RuntimeError("this metal stream is closed")
            self._pending += 1
            if self._thread is None:
                self._thread = threading.Thread(
                    target=_worker,
                    args=(self._work, self._backend.mlx_device),
                    name="pdc-metal-stream",
                    daemon=True,
                )
                self._thread.start()
                self._finalizer = weakref.finalize(self, self._work.put, _STOP)
        self._work.put(lambda: self._run(work))

    def _run(self, work: _Work) -> None:
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
        if not isinstance(event, MetalEvent):
            raise TypeError(f"a metal stream can only wait for a metal event, not {event!r}")
        self._enqueue(event.synchronize)

    def close(self) -> None:
        """Wait for queued work, then stop the worker thread (and its MLX stream)."""
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

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{self._pending} pending"
        return f"<MetalStream on {self._backend.qualified_name}, {state}>"


class MetalEvent(Event):
    """A marker in a :class:`MetalStream`; an event never recorded counts as done.

    It is reached when everything queued before it has run and been evaluated.
    """

    def __init__(self) -> None:
        self._reached = threading.Event()
        self._reached.set()

    def record(self, stream: Stream) -> None:
        if not isinstance(stream, MetalStream):
            raise TypeError(f"a metal event can only be recorded on a metal stream, not {stream!r}")
        self._reached.clear()
        stream._enqueue(self._reached.set)

    @property
    def done(self) -> bool:
        return self._reached.is_set()

    def synchronize(self) -> None:
        self._reached.wait()
