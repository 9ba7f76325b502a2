"""The host end of a ring region: :class:`RingHost`, the one writer of the host's words.

The protocol gives the host four words of the control block: the indices ``IN_HEAD``
and ``OUT_TAIL`` and the control words ``STOP`` and ``PAUSE``. This module is the only
code of pdc (and of its plugins) that stores them, so each store has one place, one
memory-ordering argument and one set of checks:

* the host session writes requests and reads replies (:meth:`RingHost.write`,
  :meth:`~RingHost.put_one`, :meth:`~RingHost.read`, :meth:`~RingHost.take_one`,
  :meth:`~RingHost.release`);
* a producer that writes its slots in place (a pipeline stage feeding the next)
  publishes them with :meth:`RingHost.commit`;
* a resident kernel's stop, pause and resume go through :meth:`RingHost.request_stop`
  and :meth:`RingHost.set_pause` (``ResidentKernel`` asks its :attr:`ring` for them);
* a launch that failed half way stops what it may have started with
  :meth:`RingHost.force_stop` (or, for a region the host reaches only by copies,
  writes :meth:`RingHost.force_stop_word` at its offset).

``tests/backend/test_ring_roles.py`` holds it: no other module stores a host word or
assigns a :class:`RingHost`'s indices.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from ..._exceptions import RingProtocolError
from ._layout import _U64, Offset, StopMode
from ._memory import RingMemory
from ._records import (
    _BYTE_COPY_MIN,
    _PLAIN_NUMBERS,
    _padded,
    _plan,
    _plans,
    coerce_record,
    copy_records,
    records_copy,
)


class RingHost:
    """The host's side of a ring region: it writes requests and reads replies.

    The host owns ``IN_HEAD``, ``OUT_TAIL``, ``STOP`` and ``PAUSE``; it keeps its own
    copies of the two indices it writes and caches the ones the kernel writes,
    reloading them only when the cache says it cannot proceed. Methods never wait.
    Not thread-safe: one host task (or one event loop) drives it.

    Memory ordering (``docs/ring-protocol.md`` section 5): its loads and stores are plain
    NumPy ones, each a separate C call; on an x86-64 host (TSO) they are the acquires
    and releases the protocol asks for, with no fence. The comments at each store say
    which it is.
    """

    def __init__(self, memory: RingMemory) -> None:
        self.memory = memory
        layout = memory.layout
        self._in_cap = layout.in_capacity
        self._out_cap = layout.out_capacity
        self._cache_views()
        # The host's own indices: always equal to the words in the region (each store
        # of the word comes with the assignment), changed only by this class: in_head
        # by write/put_one/commit, out_tail by release/take_one (read_loaded releases).
        # Read them freely; never assign them from outside.
        #: Requests published (``IN_HEAD``): only grows, at most ``in_tail + capacity``.
        self.in_head = memory.load64(Offset.IN_HEAD)
        #: Replies consumed (``OUT_TAIL``): only grows, never past ``out_head``.
        self.out_tail = memory.load64(Offset.OUT_TAIL)
        # The kernel's indices as last loaded: each may lag the word (the kernel moves
        # it), never lead it; reloaded (and checked) by load_in_tail/load_out_head only
        # when the cached value says the host cannot proceed. in_tail <= in_head and
        # out_tail <= out_head <= min(out_tail + out capacity, in_head) at every load.
        self._in_tail = memory.load64(Offset.IN_TAIL)
        self._out_head = memory.load64(Offset.OUT_HEAD)

    def _cache_views(self) -> None:
        memory = self.memory
        dtype = memory.layout.request_dtype
        self._request_dtype = dtype
        #: Positions of the request dtype's integer fields when it is structured (a
        #: tuple of plain ints stored there needs no exactness check), else ``None``.
        self._integer_positions: tuple[int, ...] | None = (
            None
            if dtype.names is None
            else tuple(position for position, _ in (_plans.get(id(dtype)) or _plan(dtype))[2])
        )
        self._in_slots = memory.in_slots
        self._in_payloads = memory.in_payloads
        self._in_sequences = memory.in_sequences
        #: 1, 2, ... up to the capacity: the sequence words of a batch, offset by its head.
        self._counting = np.arange(1, self._in_cap + 1, dtype=_U64)
        self._out_slots = memory.out_slots
        #: Replies with padding: take_one copies them as bytes (see there).
        self._out_padded = _padded(self._out_slots.dtype)
        self._w64 = memory.words64
        self._w32 = memory.words32

    def detach(self) -> None:
        """:meth:`RingMemory.detach` the region (its kernel has exited); the host side
        keeps reading its last values from the copy."""
        self.memory.detach()
        self._cache_views()

    # -- indices the kernel writes --------------------------------------------------

    def load_in_tail(self) -> int:
        """Reload ``IN_TAIL`` (acquire) and check it against the host's view."""
        tail = int(self._w64[Offset.IN_TAIL >> 3])
        if tail != self._in_tail:
            if not (self._in_tail <= tail <= self.in_head):
                raise RingProtocolError(
                    f"the kernel moved in_tail from {self._in_tail} to {tail} with in_head at "
                    f"{self.in_head}: it must only grow and never pass in_head"
                )
            self._in_tail = tail
        return tail

    def load_out_head(self) -> int:
        """Reload ``OUT_HEAD`` (acquire) and check it against the host's view."""
        head = int(self._w64[Offset.OUT_HEAD >> 3])
        if head != self._out_head:
            if not (self._out_head <= head <= self.out_tail + self._out_cap) or head > self.in_head:
                raise RingProtocolError(
                    f"the kernel moved out_head from {self._out_head} to {head} "
                    f"(out_tail {self.out_tail}, capacity {self._out_cap}, "
                    f"in_head {self.in_head}): "
                    "it must only grow, stay within capacity and never pass in_head"
                )
            self._out_head = head
        return head

    @property
    def in_tail(self) -> int:
        """The last ``IN_TAIL`` loaded."""
        return self._in_tail

    @property
    def out_head(self) -> int:
        """The last ``OUT_HEAD`` loaded."""
        return self._out_head

    # -- requests --------------------------------------------------------------------

    def free_slots(self) -> int:
        """Input slots the host may write now (reloads ``IN_TAIL``)."""
        return self._in_cap - (self.in_head - self.load_in_tail())

    def write(self, records: npt.NDArray[Any]) -> int:
        """Write as many of ``records`` as fit and publish them with one ``IN_HEAD`` store.

        ``records`` must already be a 1-D array of the request dtype (see
        :func:`coerce_batch`). Returns how many were written, from the front; 0 when
        the ring is full. Records wrapping past the ring's end are written in two
        pieces, but published together. With sequenced input slots every record's
        sequence word is stored after every record, and ``IN_HEAD`` after every
        sequence word.
        """
        wanted = len(records)
        free = self._in_cap - (self.in_head - self._in_tail)
        if free < wanted:  # the cached tail says it may not fit: look again
            free = self.free_slots()
        count = min(free, wanted)
        if count == 0:
            return 0
        head = self.in_head
        start = head % self._in_cap
        first = min(count, self._in_cap - start)
        if self._in_sequences is None:
            slots = self._in_slots
            if first == count:
                copy_records(slots[start : start + count], records[:count])
            else:
                copy_records(slots[start:], records[:first])
                copy_records(slots[: count - first], records[first:count])
        else:
            self._write_sequenced(records, head, start, first, count)
        head += count
        self.in_head = head
        self._w64[Offset.IN_HEAD >> 3] = head  # release: slots above are written first
        return count

    def commit(self, count: int) -> None:
        """Publish ``count`` requests a producer wrote in place, from slot ``in_head %
        capacity`` on (one ``IN_HEAD`` store), as a pipeline stage does into the next
        ring: the records are already in the slots, the host stores only the index.

        ``count`` must fit the free slots the last :meth:`free_slots` saw; more is a
        :class:`ValueError` (nothing is stored). Only for a ring without sequence words
        (a link's layout is exact): on a sequenced ring, records need :meth:`write`.
        """
        if self._in_sequences is not None:
            raise ValueError("commit() publishes plain slots; this ring has sequence words")
        head = self.in_head
        if not 0 <= count <= self._in_cap - (head - self._in_tail):
            raise ValueError(
                f"cannot commit {count} requests: "
                f"{self._in_cap - (head - self._in_tail)} slots are free"
            )
        head += count
        self.in_head = head
        self._w64[Offset.IN_HEAD >> 3] = head  # release: the producer wrote the slots first

    def put_one(self, record: Any) -> bool:
        """Convert ``record`` into the next input slot and publish it; ``False`` (nothing
        converted, nothing written) when the ring is full.

        The host owns slot ``in_head % capacity`` until it stores ``IN_HEAD``, so the
        record is converted straight into it: a tuple of field values whose integer
        fields hold plain ints is stored as it is, anything else goes through
        :func:`coerce_record` (its rules, its :class:`RecordError`). A record refused
        publishes nothing. Then its sequence word (sequenced slots), then ``IN_HEAD``:
        the single-record form of :meth:`write`, in a few calls.
        """
        head = self.in_head
        cap = self._in_cap
        if head - self._in_tail >= cap and head - self.load_in_tail() >= cap:
            return False
        slot = head % cap
        slots = self._in_slots
        positions = self._integer_positions
        # The records coerce_record would take as they are (its fast case): a tuple of
        # plain numbers (no text to refuse), plain ints in the integer fields (no
        # inexact cast to refuse). Anything else goes through coerce_record's rules.
        stored = False
        if positions is not None and type(record) is tuple:
            stored = True
            for item in record:
                if type(item) not in _PLAIN_NUMBERS:
                    stored = False
                    break
            else:
                try:
                    for position in positions:
                        if type(record[position]) is not int:
                            stored = False
                            break
                except IndexError:  # a short tuple: NumPy's to refuse, in coerce_record
                    stored = False
        if stored:
            try:
                slots[slot] = record
            except (TypeError, ValueError, OverflowError):
                stored = False  # coerce_record says why, in its words
        if not stored:
            slots[slot] = coerce_record(record, self._request_dtype)[0]
        sequences = self._in_sequences
        head += 1
        if sequences is not None:
            sequences[slot] = head  # release: after the record's stores above
        self.in_head = head
        self._w64[Offset.IN_HEAD >> 3] = head  # release: the slot above is written first
        return True

    def _write_sequenced(
        self, records: npt.NDArray[Any], head: int, start: int, first: int, count: int
    ) -> None:
        """Copy ``count`` records into sequenced slots from ``start`` (``first`` of them
        before the ring's end), then store their sequence words (record ``i`` of the
        ring gets ``i + 1``): every payload store precedes every sequence store."""
        pieces = [(start, 0, first)]
        if first < count:
            pieces.append((0, first, count))
        for slot, begin, end in pieces:
            self._copy_in(slot, records[begin:end])
        self._stamp(head, pieces)  # release: every payload store above comes first

    def _stamp(self, head: int, pieces: list[tuple[int, int, int]]) -> None:
        """Store the sequence words of the records just copied: ``(slot, begin, end)``
        pieces of the batch, record ``begin`` of the batch being request ``head + begin``."""
        sequences = self._in_sequences
        assert sequences is not None
        if len(pieces) == 1 and pieces[0][2] == 1:
            sequences[pieces[0][0]] = head + 1
            return
        for slot, begin, end in pieces:
            np.add(
                self._counting[: end - begin],
                head + begin,
                out=sequences[slot : slot + end - begin],
            )

    def _copy_in(self, slot: int, records: npt.NDArray[Any]) -> None:
        """Copy ``records`` into the sequenced slots from ``slot`` on: a short run
        record by record, a long one as opaque records (one strided copy of bytes,
        not one per field)."""
        count = len(records)
        payloads = self._in_payloads
        assert payloads is not None
        if count < _BYTE_COPY_MIN or not records.flags.c_contiguous:
            self._in_slots[slot : slot + count] = records
            return
        payloads[slot : slot + count] = records.view(payloads.dtype)

    # -- replies ---------------------------------------------------------------------

    def replies_ready(self) -> int:
        """Replies published and not yet read (reloads ``OUT_HEAD``)."""
        return self.load_out_head() - self.out_tail

    def read(self, limit: int | None = None) -> npt.NDArray[Any]:
        """Copy out up to ``limit`` published replies (all when ``None``), in order.

        The slots are released to the kernel (one ``OUT_TAIL`` store) after the copy.
        Returns an empty array when there is nothing to read.
        """
        self.load_out_head()
        return self.read_loaded(limit)

    def read_loaded(self, limit: int | None = None) -> npt.NDArray[Any]:
        """:meth:`read` without reloading ``OUT_HEAD`` (use the last value loaded)."""
        pieces = self.published(limit)
        if len(pieces) == 2:
            first = len(pieces[0])
            replies = np.empty(first + len(pieces[1]), self._out_slots.dtype)
            copy_records(replies[:first], pieces[0])
            copy_records(replies[first:], pieces[1])
        else:
            replies = records_copy(pieces[0] if pieces else self._out_slots[:0])
        self.release(len(replies))
        return replies

    def take_one(self) -> Any:
        """Copy out the next published reply and give its slot back (one ``OUT_TAIL``
        store); ``None`` when none is published (reloads ``OUT_HEAD``). The
        single-record form of :meth:`read`."""
        tail = self.out_tail
        if self.load_out_head() == tail:
            return None
        slot = tail % self._out_cap
        if self._out_padded:
            # NumPy copies a record field by field, leaving the copy's padding as the
            # allocator left it (heap bytes): copy the slot's bytes, zero padding included.
            reply = records_copy(self._out_slots[slot : slot + 1])[0]
        else:
            reply = self._out_slots[slot].copy()  # a scalar, not a view
        tail += 1
        self.out_tail = tail
        self._w64[Offset.OUT_TAIL >> 3] = tail  # release: the copy out is complete
        return reply

    def published(self, limit: int | None = None) -> list[npt.NDArray[Any]]:
        """Views of up to ``limit`` published, unread replies (per the last ``OUT_HEAD``
        loaded), in order: none, one, or two when they wrap past the ring's end.

        The views stay valid until :meth:`release`; a reader that copies what it
        keeps and then releases reads each reply with one copy.
        """
        ready = self._out_head - self.out_tail
        count = ready if limit is None else min(ready, limit)
        if count <= 0:
            return []
        start = self.out_tail % self._out_cap
        end = start + count
        slots = self._out_slots
        if end <= self._out_cap:
            return [slots[start:end]]
        return [slots[start:], slots[: end - self._out_cap]]

    def release(self, count: int) -> None:
        """Give ``count`` read replies' slots back to the kernel (one ``OUT_TAIL`` store).

        Call it only after every copy out of those slots is complete.
        """
        if not 0 <= count <= self._out_head - self.out_tail:
            raise ValueError(
                f"cannot release {count} replies: {self._out_head - self.out_tail} are published"
            )
        tail = self.out_tail + count
        self.out_tail = tail
        self._w64[Offset.OUT_TAIL >> 3] = tail  # release: the copies out are complete

    # -- control ----------------------------------------------------------------------

    def request_stop(self, mode: StopMode = StopMode.NOW) -> None:
        """Store ``STOP``; a stronger request (``NOW``) overrides a weaker one (``DRAIN``)."""
        current = int(self._w32[Offset.STOP >> 2])
        if current == StopMode.NOW:
            return
        self._w32[Offset.STOP >> 2] = int(mode)  # release: after the last IN_HEAD store

    def set_pause(self, paused: bool) -> None:
        """Store ``PAUSE``."""
        self._w32[Offset.PAUSE >> 2] = 1 if paused else 0  # no order needed: no data

    @staticmethod
    def force_stop(memory: RingMemory) -> None:
        """Store ``STOP = NOW`` into ``memory``'s region without a :class:`RingHost`:
        the emergency stop of a launch that failed or was interrupted half way, so a
        kernel that was queued after all stops at its first poll. Only when no host
        end drives the region (its session was never made)."""
        memory.words32[Offset.STOP >> 2] = int(StopMode.NOW)  # no data to order

    @staticmethod
    def force_stop_word() -> tuple[int, npt.NDArray[np.uint32]]:
        """:meth:`force_stop` for a region the host reaches only by copies (device
        memory): the byte offset to write at and the word to write there."""
        return int(Offset.STOP), np.array([int(StopMode.NOW)], dtype="<u4")

    @property
    def stop_requested(self) -> StopMode:
        """The ``STOP`` word as this host last stored it."""
        return StopMode(int(self._w32[Offset.STOP >> 2]))

    @property
    def started(self) -> bool:
        """The kernel's ``STARTED`` word: it is resident and polling."""
        return bool(self._w32[Offset.STARTED >> 2])

    @property
    def paused(self) -> bool:
        """The kernel's ``PAUSED`` word: it is parked in a pause."""
        return bool(self._w32[Offset.PAUSED >> 2])

    @property
    def done(self) -> bool:
        """The kernel's ``DONE`` word: it has left its loop and touches the region no more."""
        return bool(self._w32[Offset.DONE >> 2])

    @property
    def error_code(self) -> int:
        """The kernel's ``ERROR_CODE`` word: 0 for none, else an
        :class:`~pdc_core.backend.ErrorCode` or a body-defined code of 256 or more."""
        return int(self._w32[Offset.ERROR_CODE >> 2])

    @property
    def batches(self) -> int:
        """The kernel's ``BATCHES`` counter: device batches published (informational)."""
        return int(self._w64[Offset.BATCHES >> 3])
