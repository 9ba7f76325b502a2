"""The reference device end of a ring region: :class:`RingDevice`.

The device side of the protocol in Python: it stores the kernel's words (``IN_TAIL``,
``OUT_HEAD``, the status line, the error message) and only loads the host's. The CPU
backend's worker thread runs it, a pipeline stage extends it (``LinkedDevice``), and
the protocol tests drive it step by step. Its methods never wait.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from ..._exceptions import RingProtocolError
from ._layout import _BYTE, ERROR_MESSAGE_SIZE, RING_MAGIC, RING_VERSION, Offset, StopMode
from ._memory import RingMemory


class RingDevice:
    """The kernel's side of a ring region, in Python: the reference device implementation.

    The kernel owns ``IN_TAIL``, ``OUT_HEAD`` and the status line. A device loop
    built on it (see ``docs/ring-protocol.md``)::

        dev.check_header(); dev.mark_started()
        while True:
            stop = dev.stop_mode()
            if stop is StopMode.NOW: break
            if stop is StopMode.RUN and dev.pause_requested(): park until resumed
            index, count = dev.next_batch(limit)
            if count == 0:
                if stop is StopMode.DRAIN and dev.drained(): break
                wait for the doorbell; continue
            dev.outputs(index, count)[:] = body(dev.inputs(index, count))
            dev.publish(count)
        dev.mark_done()

    Methods never wait. Not thread-safe: one device thread drives it.
    """

    def __init__(self, memory: RingMemory) -> None:
        self.memory = memory
        layout = memory.layout
        self._in_cap = layout.in_capacity
        self._out_cap = layout.out_capacity
        self._in_slots = memory.in_slots
        self._in_sequences = memory.in_sequences
        self._out_slots = memory.out_slots
        self._w64 = memory.words64
        self._w32 = memory.words32
        self.in_tail = memory.load64(Offset.IN_TAIL)
        self.out_head = memory.load64(Offset.OUT_HEAD)
        self._batches = memory.load64(Offset.BATCHES)
        #: The largest ``IN_HEAD`` loaded: with sequenced slots it may lag ``in_tail``.
        self._in_head_seen = memory.load64(Offset.IN_HEAD)

    def check_header(self) -> None:
        """Refuse a region whose header does not describe this layout."""
        memory = self.memory
        layout = memory.layout
        expected = {
            Offset.IN_CAPACITY: layout.in_capacity,
            Offset.OUT_CAPACITY: layout.out_capacity,
            Offset.IN_SLOT_SIZE: layout.in_slot_size,
            Offset.OUT_SLOT_SIZE: layout.out_slot_size,
            Offset.IN_RING: layout.in_ring_offset,
            Offset.OUT_RING: layout.out_ring_offset,
            Offset.TOTAL_SIZE: layout.total_size,
        }
        if memory.load32(Offset.MAGIC) != RING_MAGIC:
            raise RingProtocolError(f"bad ring magic {memory.load32(Offset.MAGIC):#x}")
        if memory.load32(Offset.VERSION) != RING_VERSION:
            raise RingProtocolError(
                f"ring layout version {memory.load32(Offset.VERSION)}, expected {RING_VERSION}"
            )
        features = memory.load32(Offset.FEATURES)
        if features != layout.features:
            raise RingProtocolError(
                f"ring header word FEATURES is {features:#x}, expected {int(layout.features):#x}"
            )
        for offset, value in expected.items():
            if memory.load64(offset) != value:
                raise RingProtocolError(
                    f"ring header word {offset.name} is {memory.load64(offset)}, expected {value}"
                )

    # -- status line -------------------------------------------------------------------

    def mark_started(self) -> None:
        """Store ``STARTED``: the kernel is resident and polling."""
        self._w32[Offset.STARTED >> 2] = 1

    def set_paused(self, paused: bool) -> None:
        """Store ``PAUSED``: 1 while the kernel is parked in a pause, else 0."""
        self._w32[Offset.PAUSED >> 2] = 1 if paused else 0

    def set_error(self, code: int, message: str) -> None:
        """Store the message, its length, then the code (the code is the release)."""
        if not 0 < code < 2**32:
            raise ValueError(f"an error code must be in 1..2**32-1, not {code}")
        data = message.encode("utf-8")[:ERROR_MESSAGE_SIZE]
        data = data.decode("utf-8", errors="ignore").encode("utf-8")  # whole characters only
        self.memory.error_message_bytes[: len(data)] = np.frombuffer(data, dtype=_BYTE)
        self._w32[Offset.ERROR_LENGTH >> 2] = len(data)
        self._w32[Offset.ERROR_CODE >> 2] = code

    def mark_done(self) -> None:
        """The kernel's last store: it touches the region no more."""
        self._w32[Offset.DONE >> 2] = 1

    # -- host words ---------------------------------------------------------------------

    def stop_mode(self) -> StopMode:
        """Load the host's ``STOP`` word; raises :class:`~pdc_core.RingProtocolError`
        if it holds no :class:`~pdc_core.backend.StopMode`."""
        value = int(self._w32[Offset.STOP >> 2])
        try:
            return StopMode(value)
        except ValueError:
            raise RingProtocolError(f"the STOP word holds {value}, not a StopMode") from None

    def pause_requested(self) -> bool:
        """Load the host's ``PAUSE`` word: whether it asks the kernel to pause."""
        return bool(self._w32[Offset.PAUSE >> 2])

    def load_in_head(self) -> int:
        """Load ``IN_HEAD`` and check it. With sequenced input slots it may lag behind
        ``in_tail`` (requests taken by their sequence words before the host stored it),
        but never moves backwards."""
        head = int(self._w64[Offset.IN_HEAD >> 3])
        lagging = self._in_sequences is not None and self._in_head_seen <= head < self.in_tail
        if not (lagging or self.in_tail <= head <= self.in_tail + self._in_cap):
            raise RingProtocolError(
                f"in_head is {head} with in_tail {self.in_tail} and capacity {self._in_cap}"
            )
        self._in_head_seen = head
        return head

    def load_out_tail(self) -> int:
        """Load the host's ``OUT_TAIL`` (replies it has consumed); raises
        :class:`~pdc_core.RingProtocolError` if it is ahead of ``out_head`` or more than a ring's
        capacity behind it."""
        tail = int(self._w64[Offset.OUT_TAIL >> 3])
        if not (self.out_head - self._out_cap <= tail <= self.out_head):
            raise RingProtocolError(
                f"out_tail is {tail} with out_head {self.out_head} and capacity {self._out_cap}"
            )
        return tail

    def drained(self) -> bool:
        """Every published request has been consumed and answered."""
        return self.load_in_head() == self.in_tail == self.out_head

    # -- batches -----------------------------------------------------------------------

    def next_batch(self, limit: int | None = None) -> tuple[int, int]:
        """The next run of requests that can be processed now: ``(first index, count)``.

        The run is limited by the requests published, the free output slots, ``limit``,
        and the end of either ring (a run never wraps, so its slots are contiguous in
        both rings; the next call returns the rest from slot 0). ``count`` is 0 when
        nothing can be processed.
        """
        index = self.in_tail
        return index, self._run(self.load_in_head() - index, limit)

    def sequenced(self, index: int) -> bool:
        """Whether request ``index`` (``in_tail`` or later, within capacity) is in its
        slot, by the slot's sequence word alone (``IN_HEAD`` is not read). Raises
        :class:`~pdc_core.RingProtocolError` for a word that is neither this request's
        nor the one the slot held a lap before."""
        sequences = self._in_sequences
        if sequences is None:
            raise RingProtocolError("this ring's input slots have no sequence words")
        word = int(sequences[index % self._in_cap])
        if word == index + 1:
            return True
        previous = index + 1 - self._in_cap if index >= self._in_cap else 0
        if word != previous:
            raise RingProtocolError(
                f"the sequence word of request {index}'s slot is {word}: neither {index + 1} "
                f"(published) nor {previous} (the slot's previous request)"
            )
        return False

    def next_sequenced_batch(self, limit: int | None = None) -> tuple[int, int]:
        """:meth:`next_batch`, finding the published requests by their slots' sequence
        words instead of ``IN_HEAD``: the run is the requests from ``in_tail`` whose
        words say they are there, within the same limits."""
        index = self.in_tail
        bound = self._in_cap - index % self._in_cap  # a run never wraps
        if limit is not None:
            bound = min(bound, limit)
        count = 0
        while count < bound and self.sequenced(index + count):
            count += 1
        return index, self._run(count, limit)

    def _run(self, count: int, limit: int | None) -> int:
        """``count`` published requests from ``in_tail``, cut to a run: the free output
        slots, ``limit``, and the end of either ring."""
        if count <= 0:
            return 0
        index = self.in_tail
        space = self._out_cap - (self.out_head - self.load_out_tail())
        count = min(count, space, self._in_cap - index % self._in_cap)
        count = min(count, self._out_cap - self.out_head % self._out_cap)
        if limit is not None:
            count = min(count, limit)
        return max(count, 0)

    def inputs(self, index: int, count: int) -> npt.NDArray[Any]:
        """The request slots of a run returned by :meth:`next_batch` (a view)."""
        start = index % self._in_cap
        return self._in_slots[start : start + count]

    def outputs(self, index: int, count: int) -> npt.NDArray[Any]:
        """The reply slots for the run starting at request ``index`` (a view)."""
        start = (self.out_head + index - self.in_tail) % self._out_cap
        return self._out_slots[start : start + count]

    def publish(self, count: int) -> None:
        """Publish ``count`` replies (``OUT_HEAD``), then free their requests (``IN_TAIL``)."""
        self.out_head += count
        self.in_tail += count
        self._batches += 1
        self._w64[Offset.OUT_HEAD >> 3] = self.out_head  # release: reply slots written first
        self._w64[Offset.IN_TAIL >> 3] = self.in_tail
        self._w64[Offset.BATCHES >> 3] = self._batches
