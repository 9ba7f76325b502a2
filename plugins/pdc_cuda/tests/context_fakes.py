"""A fake of the CUDA driver calls a context pdc owns is built from (``pdc_cuda._context.Driver``).

It keeps the semantics the context layer depends on:

* contexts are a stack per thread: ``push``/``pop`` move it, and every call that acts on
  the current context records which one was current (``None`` is the primary context:
  nothing pushed), so a test sees which calls went to which context;
* host memory is mapped into a context only when it was registered portable
  (``register_host(address, portable=True)``) or by that context itself;
* a module load into a context with a running kernel is recorded as ``"load while
  busy"`` -- on a GPU it waits for the kernel forever -- so a test can assert it never
  happens;
* streams run nothing: a launch leaves its stream "running" until the test finishes
  it (``finish(stream)``) or fails it (``fail(stream)``); copies move real bytes
  between NumPy arrays standing for device memory.
"""

from __future__ import annotations

import ctypes
import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np


class FakeDriverError(RuntimeError):
    """Stands for a failed driver call."""


class FakeContext:
    def __init__(self, number: int, green_sms: int | None) -> None:
        self.number = number
        self.green_sms = green_sms
        self.destroyed = False

    def __repr__(self) -> str:
        return f"ctx{self.number}"


class FakeDriverStream:
    def __init__(self, number: int, context: FakeContext) -> None:
        self.number = number
        self.context = context
        self.state = "idle"  # idle, running, failed
        self.destroyed = False


class FakeDriver:
    """Records ``(call, current context, detail)``; see the module documentation."""

    def __init__(self) -> None:
        self.log: list[tuple[str, Any, Any]] = []
        self.stack: list[FakeContext] = []
        self.contexts: list[FakeContext] = []
        self.streams: list[FakeDriverStream] = []
        #: host address -> the context that pinned it (None: portable, every context)
        self.host: dict[int, FakeContext | None] = {}
        self.memory: dict[int, np.ndarray] = {}
        self._ids = itertools.count(1)

    # -- what tests use -------------------------------------------------------------------

    @property
    def current(self) -> FakeContext | None:
        return self.stack[-1] if self.stack else None

    def calls(self, name: str) -> list[tuple[str, Any, Any]]:
        return [entry for entry in self.log if entry[0] == name]

    def register_host(self, address: int, *, portable: bool, owner: Any = None) -> None:
        self.host[address] = None if portable else owner

    def finish(self, stream: Any) -> None:
        stream.handle.state = "idle"

    def fail(self, stream: Any) -> None:
        stream.handle.state = "failed"

    def busy(self, context: FakeContext) -> bool:
        return any(s.context is context and s.state == "running" for s in self.streams)

    def _record(self, call: str, detail: Any = None) -> None:
        self.log.append((call, self.current, detail))

    def _need_current(self, call: str) -> FakeContext:
        if self.current is None:
            raise FakeDriverError(f"{call} needs a current context pdc owns")
        return self.current

    # -- the Driver protocol --------------------------------------------------------------

    def create_context(self, device: int) -> FakeContext:
        context = FakeContext(len(self.contexts) + 1, None)
        self.contexts.append(context)
        self._record("create_context", device)
        return context

    def create_green_context(self, device: int, sm_count: int) -> tuple[Any, Any, int]:
        granted = -(-sm_count // 8) * 8  # the driver rounds up to its granularity
        context = FakeContext(len(self.contexts) + 1, granted)
        self.contexts.append(context)
        self._record("create_green_context", (device, sm_count))
        return ("green", context), context, granted

    def destroy_context(self, context: FakeContext, green: Any) -> None:
        context.destroyed = True
        self._record("destroy_context", context)

    def push(self, context: FakeContext) -> None:
        if context.destroyed:
            raise FakeDriverError("the context is destroyed")
        self.stack.append(context)

    def pop(self) -> None:
        self.stack.pop()

    def load_module(self, image: bytes) -> Any:
        context = self._need_current("load_module")
        self._record("load while busy" if self.busy(context) else "load_module", image)
        return ("module", context, image)

    def get_function(self, module: Any, name: str) -> Any:
        self._record("get_function", name)
        return ("function", module[1], name)

    def max_threads_per_block(self, function: Any) -> int:
        return 256

    def create_stream(self, green: Any) -> FakeDriverStream:
        context = self._need_current("create_stream")
        stream = FakeDriverStream(next(self._ids), context)
        self.streams.append(stream)
        self._record("create_stream", green is not None)
        return stream

    def stream_done(self, stream: FakeDriverStream) -> bool:
        if stream.state == "failed":
            raise FakeDriverError("CUDA_ERROR_ILLEGAL_ADDRESS")
        return stream.state == "idle"

    def stream_synchronize(self, stream: FakeDriverStream) -> None:
        if stream.state == "running":
            raise AssertionError("a test synchronized a stream a resident kernel runs on")
        self._record("stream_synchronize", stream.number)

    def destroy_stream(self, stream: FakeDriverStream) -> None:
        stream.destroyed = True
        self._record("destroy_stream", stream.number)

    def mem_alloc(self, nbytes: int) -> int:
        self._need_current("mem_alloc")
        array = np.zeros(nbytes, np.uint8)
        address = int(array.ctypes.data)
        self.memory[address] = array
        self._record("mem_alloc", nbytes)
        return address

    def mem_free(self, address: int) -> None:
        context = self._need_current("mem_free")
        self._record("free while busy" if self.busy(context) else "mem_free", address)
        del self.memory[address]

    def copy_to_device(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        self._need_current("copy_to_device")
        ctypes.memmove(dst, src, nbytes)
        self._record("copy_to_device", nbytes)

    def copy_to_host(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        self._need_current("copy_to_host")
        ctypes.memmove(dst, src, nbytes)
        self._record("copy_to_host", nbytes)

    def host_device_pointer(self, host: int) -> int:
        context = self._need_current("host_device_pointer")
        for start, owner in self.host.items():
            if start <= host < start + (1 << 30) and owner in (None, context):
                self._record("host_device_pointer", host)
                return host  # unified addressing: the same address
        raise FakeDriverError("CUDA_ERROR_INVALID_VALUE: not mapped into this context")

    def launch(
        self,
        function: Any,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        args: Sequence[int],
        stream: FakeDriverStream,
    ) -> None:
        context = self._need_current("launch")
        if function[1] is not context or stream.context is not context:
            raise FakeDriverError("CUDA_ERROR_INVALID_HANDLE: another context's function/stream")
        stream.state = "running"
        self._record("launch", (function[2], grid, block, tuple(args)))


def fake_compiler(source: str, options: tuple[str, ...], arch: str) -> bytes:
    """Stands for NVRTC: the "image" names what was compiled."""
    return f"{arch}:{len(source)}:{' '.join(options)}".encode()
