"""Streams and events of the CUDA backend, wrapping ``cupy.cuda.Stream``/``Event``.

Every stream pdc creates is **non-blocking** (``cudaStreamNonBlocking``): it never
waits for the legacy default stream, where CuPy's own array operations go unless told
otherwise, and the legacy default stream never waits for it. That is what lets a
resident kernel occupy one stream without stalling the rest of the program.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

from pdc_core import Backend
from pdc_core.backend import Event, Stream

__all__ = [
    "CudaEvent",
    "CudaStream",
    "StreamOwner",
    "own_stream",
    "query_done",
    "synchronize_stream",
]

#: ``cudaErrorNotReady``: what ``cudaStreamQuery``/``cudaEventQuery`` return while work runs.
ERROR_NOT_READY = 600


def query_done(status: int) -> bool:
    """Interpret the status of ``cudaStreamQuery``/``cudaEventQuery``.

    ``cudaSuccess`` -> True, ``cudaErrorNotReady`` -> False, any other status (the
    work failed: an illegal address, a launch failure, ...) raises
    ``cupy.cuda.runtime.CUDARuntimeError``. CuPy's own ``Stream.done``/``Event.done``
    compare the status with 0 and so report a failed stream as "not done" forever,
    which would turn a crashed kernel into a hang.
    """
    status = int(status)
    if status == 0:
        return True
    if status == ERROR_NOT_READY:
        return False
    import cupy

    raise cupy.cuda.runtime.CUDARuntimeError(status)


def synchronize_stream(raw: Any) -> None:
    """Wait for the work queued so far on the ``cupy.cuda.Stream`` ``raw``, and no more.

    On the legacy default stream (``ptr == 0``) an event recorded on it is waited for
    instead of ``cudaStreamSynchronize(0)``: the same guarantee (work queued on the
    legacy stream, which itself waits for blocking streams), never the whole device,
    so a resident kernel on a non-blocking stream is not waited for.
    """
    if int(raw.ptr) != 0:
        raw.synchronize()
        return
    import cupy

    event = cupy.cuda.Event(block=False, disable_timing=True)
    event.record(raw)
    event.synchronize()


class StreamOwner(Protocol):
    """What :func:`own_stream` needs of a device: its name, for the error."""

    @property
    def qualified_name(self) -> str:
        """``cuda:N``."""


def own_stream(owner: StreamOwner, stream: Stream) -> CudaStream:
    """``stream`` as a CUDA stream of ``owner``: ``TypeError`` for another kind of
    stream, ``ValueError`` for a stream of another device."""
    if not isinstance(stream, CudaStream):
        raise TypeError(f"the cuda backend needs a CUDA stream, not {stream!r}")
    if stream.backend is not owner:
        raise ValueError(
            f"{stream!r} belongs to {stream.backend.qualified_name}, not {owner.qualified_name}"
        )
    return stream


class CudaStream(Stream):
    """A non-blocking CUDA stream on one device.

    Guarantees: work queued on it runs in order; :attr:`done` and :meth:`wait` never
    block the calling thread (``wait`` polls in the event loop); host memory handed to
    an asynchronous copy on it (such as a pinned staging buffer) is kept alive until
    the copy has run. :attr:`cupy` is the underlying ``cupy.cuda.Stream``, for use as
    ``with stream.cupy:`` around CuPy calls.
    """

    def __init__(
        self,
        backend: Backend,
        cupy_stream: Any,
        forget: Callable[[CudaStream], None] | None = None,
    ) -> None:
        self._backend = backend
        self._stream = cupy_stream
        #: Called once when the stream is dropped (the owner's registry of streams).
        self._forget = forget
        self._lock = threading.Lock()
        # (event, object) pairs: each object is released once its event is done.
        self._keep: list[tuple[Any, Any]] = []
        self._closed = False

    @property
    def backend(self) -> Backend:
        return self._backend

    @property
    def cupy(self) -> Any:
        """The wrapped ``cupy.cuda.Stream``."""
        if self._closed:
            raise RuntimeError("this stream is closed")
        return self._stream

    @property
    def ptr(self) -> int:
        """The raw ``cudaStream_t`` handle."""
        return int(self._stream.ptr)

    def keep_alive_until_done(self, obj: Any) -> None:
        """Hold a reference to ``obj`` until work queued so far on this stream is done."""
        import cupy

        with cupy.cuda.Device(self._backend.device):
            event = cupy.cuda.Event(block=False, disable_timing=True)
            event.record(self._stream)
        with self._lock:
            self._release_finished()
            self._keep.append((event, obj))

    def _release_finished(self) -> None:
        while self._keep and self._keep[0][0].done:
            del self._keep[0]

    @property
    def done(self) -> bool:
        """True once queued work is done; raises ``CUDARuntimeError`` if it failed."""
        import cupy

        done = query_done(cupy.cuda.runtime.streamQuery(self._stream.ptr))
        if done:
            with self._lock:
                self._keep.clear()
        return done

    def synchronize(self) -> None:
        self._stream.synchronize()
        with self._lock:
            self._keep.clear()

    def wait_event(self, event: Event) -> None:
        if not isinstance(event, CudaEvent):
            raise TypeError(f"a CUDA stream can only wait for a CUDA event, not {event!r}")
        self._stream.wait_event(event.cupy)

    def close(self) -> None:
        """Wait for queued work, then drop the stream (CuPy destroys the handle).

        The stream is closed even when waiting raises (its work failed); the error is
        raised after.
        """
        if self._closed:
            return
        try:
            self.synchronize()
        finally:
            self.discard()

    def discard(self) -> None:
        """Drop the stream without waiting for it (for a stream whose work failed or
        has already been seen done). ``cudaStreamDestroy`` returns at once; CUDA
        releases the stream when its work is over."""
        if self._closed:
            return
        self._closed = True
        with self._lock:
            self._keep.clear()
        if self._forget is not None:
            self._forget(self)

    def __repr__(self) -> str:
        return f"<CudaStream {self._backend.qualified_name} ptr=0x{self.ptr:x}>"


class CudaEvent(Event):
    """A CUDA event (timing disabled, so recording and querying it are cheap).

    An event never recorded counts as done, as in CUDA.
    """

    def __init__(self, cupy_event: Any) -> None:
        self._event = cupy_event

    @property
    def cupy(self) -> Any:
        """The wrapped ``cupy.cuda.Event``."""
        return self._event

    def record(self, stream: Stream) -> None:
        if not isinstance(stream, CudaStream):
            raise TypeError(f"a CUDA event can only be recorded on a CUDA stream, not {stream!r}")
        self._event.record(stream.cupy)

    @property
    def done(self) -> bool:
        """True once the recorded work is done; raises ``CUDARuntimeError`` if it failed."""
        import cupy

        return query_done(cupy.cuda.runtime.eventQuery(self._event.ptr))

    def synchronize(self) -> None:
        self._event.synchronize()
