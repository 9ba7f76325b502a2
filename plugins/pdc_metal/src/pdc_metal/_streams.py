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

import contextlib
import functools
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any, cast

from pdc_core import Backend
from pdc_core.backend import Stream, ThreadContext, WorkerEvent, WorkerStream

from ._mlx import MlxDevice

__all__ = ["MetalEvent", "MetalStream", "check_stream"]


@contextlib.contextmanager
def _own_mlx_stream(device: Any) -> Iterator[None]:
    """On the worker thread: a dedicated MLX stream, current while the work runs."""
    import mlx.core as mx

    mlx_stream = mx.new_stream(device)
    with mx.stream(mlx_stream):
        yield
    mx.synchronize(mlx_stream)


def evaluate(result: Any) -> Any:
    """Evaluate every MLX array in ``result`` (an array or a tree of them) and return it."""
    import mlx.core as mx

    mx.eval(result)
    return result


class MetalStream(WorkerStream):
    """An in-order queue of MLX work on a dedicated MLX stream, run by a worker thread.

    Guarantees: items run in submission order, one at a time, on this stream's own
    MLX stream; the MLX arrays an item returns are evaluated before the next item
    starts, so :meth:`synchronize` (or :attr:`done`) means "results are in memory";
    :meth:`synchronize` re-raises the first error of queued work; the worker thread
    ends when the stream is closed or garbage-collected.
    """

    def __init__(self, backend: Backend) -> None:
        super().__init__(backend)
        #: The MLX device of the backend (the metal backend, or a stand-in for it).
        self._mlx_device = cast(MlxDevice, backend).mlx_device

    def thread_context(self) -> ThreadContext:
        return functools.partial(_own_mlx_stream, self._mlx_device)

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

        self.enqueue(run)
        return future


class MetalEvent(WorkerEvent):
    """A marker in a :class:`MetalStream`; an event never recorded counts as done.

    It is reached when everything queued before it has run and been evaluated.
    """

    stream_type = MetalStream
    kind = "metal"


MetalStream.event_type = MetalEvent


def check_stream(stream: Stream | None) -> MetalStream | None:
    """``stream`` when it is a metal stream (or ``None``); a ``TypeError`` otherwise."""
    if stream is None or isinstance(stream, MetalStream):
        return stream
    raise TypeError(f"the metal backend needs a metal stream, not {stream!r}")
