"""A device that answers inside ``wake``: the fastest device a persistent-kernel session
can meet, for tests of the host's own path (its Python calls, its fair turns).

``InlineBackend`` launches an ``InlineEcho``: every request published before a
``wake`` is echoed back as its reply during that ``wake``, with NumPy stores only (no
Python call of its own), and a stop is acknowledged there too.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pdc_core import Capability
from pdc_core.backend import (
    Backend,
    Offset,
    PersistentKernelSpec,
    ResidentKernel,
    RingMemory,
    StopMode,
)

from .host_memory_backend import HostMemoryBackend

__all__ = ["InlineBackend", "InlineEcho"]

_RUN = int(StopMode.RUN)
# Word indices as plain ints (an enum member's attribute lookup is a Python call).
_STOP, _DONE = int(Offset.STOP) >> 2, int(Offset.DONE) >> 2
_IN_HEAD, _IN_TAIL, _OUT_HEAD, _OUT_TAIL = (
    int(o) >> 3 for o in (Offset.IN_HEAD, Offset.IN_TAIL, Offset.OUT_HEAD, Offset.OUT_TAIL)
)


class InlineEcho(ResidentKernel):
    """A device that echoes the published requests inside ``wake`` (the doorbell of
    ``IN_HEAD`` and ``OUT_TAIL``) as far as the reply ring has room, with NumPy stores
    only (no Python call of its own), and stops when asked."""

    def __init__(self, backend: Backend, kernel: PersistentKernelSpec, memory: RingMemory) -> None:
        super().__init__(backend, kernel, memory)
        self._done = False
        self._capacity = memory.layout.in_capacity
        self._out_capacity = memory.layout.out_capacity
        memory.words32[Offset.STARTED >> 2] = 1

    def wake(self) -> None:
        memory = self.memory
        w64 = memory.words64
        if memory.words32[_STOP] != _RUN:
            memory.words32[_DONE] = 1
            self._done = True
            return
        head = int(w64[_IN_HEAD])
        tail = int(w64[_IN_TAIL])  # the next reply's place too: one reply per request
        room = int(w64[_OUT_TAIL]) + self._out_capacity
        capacity, out_capacity = self._capacity, self._out_capacity
        while tail < head and tail < room:
            memory.out_slots[tail % out_capacity] = memory.in_slots[tail % capacity]
            tail += 1
        w64[_IN_TAIL] = tail
        w64[_OUT_HEAD] = tail

    @property
    def exited(self) -> bool:
        return self._done


class InlineBackend(HostMemoryBackend):
    name: ClassVar[str] = "inline"
    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.PERSISTENT_KERNELS})

    def launch_persistent_kernel(
        self, kernel: PersistentKernelSpec, rings: RingMemory, **options: Any
    ) -> ResidentKernel:
        return InlineEcho(self, kernel, rings)
