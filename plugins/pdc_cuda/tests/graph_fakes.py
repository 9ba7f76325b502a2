"""A fake of the CUDA calls a ``MessageLauncher`` makes (``pdc_cuda._graphs.GraphOps``).

It keeps CUDA's semantics where the launcher's correctness depends on them:

* work is queued on a stream and runs only when the stream is synchronized or queried
  (``hold`` keeps a stream "running" until a test lets it go);
* while a stream captures, its work is recorded instead of run, and a replay queues the
  recorded calls again, with the addresses they were recorded with -- so a launcher
  that copied a message's input anywhere but into the captured buffer gives wrong
  results here, as it would on a GPU;
* copies move real bytes (``ctypes.memmove``) between NumPy arrays standing for pinned
  host and device memory;
* graphs, executables, streams and buffers are counted while alive, so a test can
  check that closing (or cancelling) frees everything.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import numpy.typing as npt


class FakeCudaError(Exception):
    """Stands for ``cupy.cuda.runtime.CUDARuntimeError``."""


class FakeStream:
    def __init__(self, ptr: int) -> None:
        self.ptr = ptr
        self.queue: list[Callable[[], None]] = []
        self.capture: list[Callable[[], None]] | None = None
        #: While true, queued work does not run (the device is "busy").
        self.hold = False
        self.closed = False
        #: What the thread did to the stream during a capture that CUDA refuses.
        self.invalidate_capture = False

    def enqueue(self, work: Callable[[], None]) -> None:
        if self.closed:
            raise FakeCudaError("the stream is closed")
        if self.capture is not None:
            self.capture.append(work)
        else:
            self.queue.append(work)

    def run(self) -> None:
        while self.queue:
            self.queue.pop(0)()


class FakeRaw:
    """Stands for ``cupy.RawKernel``: runs ``body(*args)`` on the NumPy "device" arrays."""

    def __init__(self, body: Callable[..., None], max_threads_per_block: int = 1024) -> None:
        self.body = body
        self.max_threads_per_block = max_threads_per_block
        #: (grid, block, (id, type) of each argument, shared_mem) per run; no reference
        #: to the arguments, so that a test can watch buffers being freed.
        self.calls: list[tuple[Any, ...]] = []

    def __call__(
        self, grid: Any, block: Any, args: tuple[Any, ...], *, shared_mem: int = 0
    ) -> None:
        self.calls.append((grid, block, tuple((id(a), type(a)) for a in args), shared_mem))
        self.body(*args)


class FakeGraphOps:
    """``GraphOps`` over NumPy arrays, with CUDA's queueing and capture semantics."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self._ids = itertools.count(0x1000)
        self.streams: list[FakeStream] = []
        self.graphs: dict[int, list[Callable[[], None]]] = {}
        self.executables: dict[int, list[Callable[[], None]]] = {}
        self.live_buffers = 0
        self.fail_launch_with: BaseException | None = None
        self.fail_instantiate = False

    # -- bookkeeping ---------------------------------------------------------------------

    def _track(self, array: npt.NDArray[Any]) -> npt.NDArray[Any]:
        self.live_buffers += 1
        weakref.finalize(array, self._untrack)
        return array

    def _untrack(self) -> None:
        self.live_buffers -= 1

    # -- GraphOps --------------------------------------------------------------------------

    @contextlib.contextmanager
    def device_context(self) -> Iterator[None]:
        yield

    def create_stream(self) -> FakeStream:
        stream = FakeStream(next(self._ids))
        self.streams.append(stream)
        return stream

    def close_stream(self, stream: FakeStream) -> None:
        stream.run()
        stream.closed = True
        self.log.append("close_stream")

    def host_buffer(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> npt.NDArray[Any]:
        return self._track(np.zeros(shape, dtype))

    def device_buffer(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> npt.NDArray[Any]:
        return self._track(np.zeros(shape, dtype))

    def device_address(self, array: npt.NDArray[Any]) -> int:
        return int(array.ctypes.data)

    def copy_to_device(self, dst: int, src: int, nbytes: int, stream: FakeStream) -> None:
        self.log.append("copy_to_device")
        stream.enqueue(lambda: ctypes.memmove(dst, src, nbytes))

    def copy_to_host(self, dst: int, src: int, nbytes: int, stream: FakeStream) -> None:
        self.log.append("copy_to_host")
        stream.enqueue(lambda: ctypes.memmove(dst, src, nbytes))

    def launch(
        self,
        kernel: Any,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        args: tuple[Any, ...],
        shared_mem: int,
        stream: FakeStream,
    ) -> None:
        self.log.append("launch")
        if self.fail_launch_with is not None:
            raise self.fail_launch_with
        raw = kernel.raw
        stream.enqueue(lambda: raw(grid, block, args, shared_mem=shared_mem))

    def begin_capture(self, stream: FakeStream) -> None:
        if stream.capture is not None:
            raise FakeCudaError("the stream is already capturing")
        self.log.append("begin_capture")
        stream.capture = []

    def end_capture(self, stream: FakeStream) -> int:
        if stream.capture is None:
            raise FakeCudaError("the stream is not capturing")
        self.log.append("end_capture")
        recorded, stream.capture = stream.capture, None
        if stream.invalidate_capture:
            raise FakeCudaError("cudaErrorStreamCaptureInvalidated")
        graph = next(self._ids)
        self.graphs[graph] = recorded
        return graph

    def instantiate(self, graph: int, stream: FakeStream) -> int:
        self.log.append("instantiate")
        if self.fail_instantiate:
            raise FakeCudaError("cudaErrorInvalidValue")
        executable = next(self._ids)
        self.executables[executable] = list(self.graphs[graph])
        return executable

    def replay(self, executable: int, stream: FakeStream) -> None:
        self.log.append("replay")
        for work in self.executables[executable]:
            stream.enqueue(work)

    def destroy_graph(self, graph: int) -> None:
        self.log.append("destroy_graph")
        del self.graphs[graph]

    def destroy_executable(self, executable: int) -> None:
        self.log.append("destroy_executable")
        del self.executables[executable]

    def synchronize(self, stream: FakeStream) -> None:
        stream.run()

    def done(self, stream: FakeStream) -> bool:
        if stream.hold:
            return False
        stream.run()
        return True
