"""The ring region's layout: its constants, the control block's words and their
values (:class:`Offset`, :class:`StopMode`, :class:`ErrorCode`, :class:`RingFeature`),
the record dtypes a slot may hold, and :class:`RingLayout` (where everything lives for
one pair of record dtypes and capacities). Pure arithmetic: nothing here touches memory.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from ..._exceptions import RecordError
from ..._loop import check_count

#: Size of one line of the control block: each line is written by one side only.
LINE_SIZE: Final = 64
#: Bytes of the control block; the input ring starts right after it.
CONTROL_BLOCK_SIZE: Final = 1024
#: The first four bytes of the region, ``b"PDCR"`` read as a little-endian u32.
RING_MAGIC: Final = 0x52434450
#: Version of the layout described here; the device side refuses any other.
RING_VERSION: Final = 2
#: Bytes reserved for the kernel's error message (UTF-8, not NUL-terminated).
ERROR_MESSAGE_SIZE: Final = 256
#: Every ring starts on a multiple of this many bytes from the region's start.
RING_ALIGNMENT: Final = 64


class Offset(enum.IntEnum):
    """Byte offset of each word of the control block from the start of the region.

    All words are little-endian and naturally aligned. ``u64`` words are indices and
    sizes, ``u32`` words are flags and codes. The writer of each line is fixed:

    =====  ===========  ========================================================
    line   writer       words
    =====  ===========  ========================================================
    0      host (once)  header: magic, version, capacities, slot sizes, offsets
    1      host         ``IN_HEAD``
    2      kernel       ``IN_TAIL``
    3      kernel       ``OUT_HEAD``
    4      host         ``OUT_TAIL``
    5      host         ``STOP``, ``PAUSE``
    6      kernel       ``STARTED``, ``PAUSED``, ``DONE``, ``ERROR_CODE``,
                        ``ERROR_LENGTH``, ``BATCHES``
    7-10   kernel       ``ERROR_MESSAGE`` (256 bytes)
    11     host (once)  ``FEATURES`` (a :class:`RingFeature`), then reserved, zero
    12-15  nobody       reserved, zero
    =====  ===========  ========================================================
    """

    # line 0: header (host, before launch; read-only afterwards)
    MAGIC = 0  # u32
    VERSION = 4  # u32
    IN_CAPACITY = 8  # u64, slots in the input ring
    OUT_CAPACITY = 16  # u64, slots in the output ring
    IN_SLOT_SIZE = 24  # u64, bytes per input slot (the request dtype's itemsize)
    OUT_SLOT_SIZE = 32  # u64, bytes per output slot (the reply dtype's itemsize)
    IN_RING = 40  # u64, byte offset of input slot 0 from the region's start
    OUT_RING = 48  # u64, byte offset of output slot 0 from the region's start
    TOTAL_SIZE = 56  # u64, bytes of the whole region
    # line 1 (host)
    IN_HEAD = 64  # u64, requests published
    # line 2 (kernel)
    IN_TAIL = 128  # u64, requests consumed (their slots may be reused)
    # line 3 (kernel)
    OUT_HEAD = 192  # u64, replies published
    # line 4 (host)
    OUT_TAIL = 256  # u64, replies consumed (their slots may be reused)
    # line 5 (host)
    STOP = 320  # u32, a StopMode
    PAUSE = 324  # u32, 1 while the host asks the kernel to pause
    # line 6 (kernel)
    STARTED = 384  # u32, 1 once the kernel is resident and polling
    PAUSED = 388  # u32, 1 while the kernel is parked in a pause
    DONE = 392  # u32, 1 once the kernel has left its loop (its last store)
    ERROR_CODE = 396  # u32, an ErrorCode or a body-defined code >= 256; 0: none
    ERROR_LENGTH = 400  # u32, bytes of ERROR_MESSAGE in use
    BATCHES = 408  # u64, device batches published (informational)
    # lines 7-10 (kernel)
    ERROR_MESSAGE = 448  # 256 bytes of UTF-8
    # line 11: header (host, before launch; read-only afterwards)
    FEATURES = 704  # u32, RingFeature bits: how the rings are laid out


class RingFeature(enum.IntFlag):
    """Bits of the ``FEATURES`` word: layout options a device must understand.

    A device refuses a region whose ``FEATURES`` word holds a bit it does not know.
    """

    NONE = 0
    #: Each input slot holds the request and, in the same cache line where it fits, a
    #: u64 *sequence word*: request ``i`` is in its slot once the word reads ``i + 1``
    #: (``docs/ring-protocol.md``, section 12).
    SEQUENCED_INPUT = 1


class StopMode(enum.IntEnum):
    """Values of the ``STOP`` word."""

    #: Keep running.
    RUN = 0
    #: Finish the batch in progress, then stop; leave unconsumed requests alone.
    NOW = 1
    #: Consume and answer every request published before the stop, then stop.
    DRAIN = 2


class ErrorCode(enum.IntEnum):
    """Values of the ``ERROR_CODE`` word defined by the protocol.

    Codes from :attr:`USER` (256) up are free for kernel bodies to define.
    """

    NONE = 0
    #: The kernel body failed (raised, trapped, asserted); the message says how.
    BODY = 1
    #: The body produced replies of the wrong number, dtype or size.
    BAD_REPLY = 2
    #: The device found the control block in an impossible state (bad magic or
    #: version, an index moving backwards, a head beyond its tail plus capacity).
    PROTOCOL = 3
    #: The device side failed outside the body (resources, a backend bug).
    DEVICE = 4
    #: First code free for kernel bodies.
    USER = 256


_U64 = np.dtype("<u8")
_U32 = np.dtype("<u4")
_BYTE = np.dtype(np.uint8)


def _align(value: int, alignment: int = RING_ALIGNMENT) -> int:
    return -(-value // alignment) * alignment


def record_dtype(dtype: npt.DTypeLike, what: str) -> np.dtype[Any]:
    """Validate ``dtype`` as the record layout of a ring's slots and return it.

    A record dtype must have a fixed, non-zero size and hold no Python objects (the
    device reads its bytes). Structured dtypes are the norm; a plain dtype such as
    ``float64`` is a one-field record. Raises :class:`TypeError` for ``None`` (which
    NumPy would read as ``float64``), anything that is not a dtype, a dtype holding
    objects and a subarray dtype; :class:`~pdc_core.RecordError` for a dtype of no size
    (``np.dtype([])``, ``V0``, ``S0``, ``U0``).
    """
    if dtype is None:  # np.dtype(None) is float64: a forgotten dtype, not a layout
        raise TypeError(f"the {what} dtype is None; give the record layout (a NumPy dtype)")
    try:
        canonical = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"the {what} dtype {dtype!r} is not a NumPy dtype: {exc}") from None
    if canonical.hasobject:
        raise TypeError(
            f"the {what} dtype {canonical} holds Python objects, which a device cannot read"
        )
    if canonical.itemsize == 0:  # np.dtype([]), V0, S0, U0: no record fits no bytes
        raise RecordError(f"the {what} dtype {canonical} has no size; a slot needs a fixed size")
    if canonical.subdtype is not None:
        raise TypeError(
            f"the {what} dtype {canonical} is a subarray dtype; wrap it in a structured dtype "
            f"such as np.dtype([('data', {canonical.str!r})])"
        )
    return canonical


def sequenced_slot_size(itemsize: int) -> int:
    """Bytes per input slot holding a record of ``itemsize`` bytes and its sequence word.

    The sequence word follows the record at the next multiple of 8; the slot is the
    smallest power of two that holds both when that is at most one 64-byte line (so a
    slot never straddles a line: the ring starts on a line), else both rounded up to
    whole lines.
    """
    needed = _align(itemsize, 8) + 8
    if needed <= RING_ALIGNMENT:
        return 1 << (needed - 1).bit_length()
    return _align(needed)


def _capacity(value: int, what: str) -> int:
    value = check_count(value, f"the {what} capacity")
    if value >= 2**32:
        raise ValueError(f"the {what} capacity {value} is too large (at most 2**32 - 1 slots)")
    return value


@dataclass(frozen=True)
class RingLayout:
    """Where everything lives in a ring region, for one pair of record dtypes.

    The region is ``[control block][input ring][output ring]``: the input ring at
    :data:`CONTROL_BLOCK_SIZE`, the output ring at the next multiple of 64 after the
    input ring. Slot ``k`` of a ring is at ``ring offset + k * slot size``, and the
    slot size is exactly the record dtype's ``itemsize`` -- except for the input ring of
    a ``sequenced_input`` layout, whose slots hold the request at their start and its
    sequence word at :attr:`in_sequence_offset` (:func:`sequenced_slot_size` bytes).
    """

    request_dtype: np.dtype[Any]
    reply_dtype: np.dtype[Any]
    in_capacity: int
    out_capacity: int
    sequenced_input: bool

    def __init__(
        self,
        request_dtype: npt.DTypeLike,
        reply_dtype: npt.DTypeLike,
        in_capacity: int,
        out_capacity: int | None = None,
        *,
        sequenced_input: bool = False,
    ) -> None:
        object.__setattr__(self, "request_dtype", record_dtype(request_dtype, "request"))
        object.__setattr__(self, "reply_dtype", record_dtype(reply_dtype, "reply"))
        object.__setattr__(self, "in_capacity", _capacity(in_capacity, "input ring"))
        out = in_capacity if out_capacity is None else out_capacity
        object.__setattr__(self, "out_capacity", _capacity(out, "output ring"))
        if not isinstance(sequenced_input, bool):
            raise TypeError(f"sequenced_input must be a bool, not {sequenced_input!r}")
        object.__setattr__(self, "sequenced_input", sequenced_input)

    def with_sequenced_input(self, sequenced: bool = True) -> RingLayout:
        """This layout with (or without) sequenced input slots."""
        return RingLayout(
            self.request_dtype,
            self.reply_dtype,
            self.in_capacity,
            self.out_capacity,
            sequenced_input=sequenced,
        )

    @property
    def features(self) -> RingFeature:
        """The ``FEATURES`` word of a region of this layout."""
        return RingFeature.SEQUENCED_INPUT if self.sequenced_input else RingFeature.NONE

    @property
    def in_slot_size(self) -> int:
        """Bytes per input slot (the ``IN_SLOT_SIZE`` word)."""
        itemsize = self.request_dtype.itemsize
        return sequenced_slot_size(itemsize) if self.sequenced_input else itemsize

    @property
    def in_sequence_offset(self) -> int | None:
        """Where an input slot's sequence word is, from the slot's start (``None``
        without sequenced input slots)."""
        return _align(self.request_dtype.itemsize, 8) if self.sequenced_input else None

    @property
    def out_slot_size(self) -> int:
        """Bytes per output slot: the reply record's size."""
        return self.reply_dtype.itemsize

    @property
    def in_ring_offset(self) -> int:
        """Where the input ring starts in the region: right after the control block."""
        return CONTROL_BLOCK_SIZE

    @property
    def out_ring_offset(self) -> int:
        """Where the output ring starts in the region: after the input ring, aligned."""
        return _align(self.in_ring_offset + self.in_capacity * self.in_slot_size)

    @property
    def total_size(self) -> int:
        """Bytes of the whole region (control block and both rings), aligned."""
        return _align(self.out_ring_offset + self.out_capacity * self.out_slot_size)
