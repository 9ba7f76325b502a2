"""The ring protocol of persistent kernels, shared by every backend.

One contiguous region of memory the host and the device both address (``MAPPED``
memory: pinned host memory the GPU reads on CUDA, ordinary host memory on the CPU)
holds a *control block* of 64-byte lines followed by two rings of fixed-size slots:
the input ring (requests, host -> kernel) and the output ring (replies, kernel ->
host). Every word of the control block is written by exactly one side; each side only
loads and stores (no read-modify-write crosses the host/device boundary). Indices are
64-bit, start at 0 and only grow; the slot of index ``i`` is ``i % capacity``.

``docs/ring-protocol.md`` is the normative description (byte offsets, who writes
what, memory ordering, the start/stop/pause/error handshakes). This module holds the
layout constants that document refers to, :class:`RingLayout` (offsets for a given
pair of record dtypes and capacities), :class:`RingMemory` (an initialised region),
and the two endpoints: :class:`RingHost`, used by the host side, and
:class:`RingDevice`, a reference implementation of the device side in Python that
the CPU backend runs in its worker thread and the protocol tests drive step by step.

A layout may ask for *sequenced input slots* (``RingLayout(..., sequenced_input=True)``,
the ``FEATURES`` word): each input slot then carries, in the record's own cache line, a
sequence word the host stores after the record, so a device across a bus can see that
a request is there, and read it, with one read of one line. The host still publishes
``IN_HEAD``; a device may poll either.

Neither endpoint blocks or waits: they report what is possible now, and the callers
(the async host session, a backend's worker) decide how to wait.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from .._exceptions import RecordError, RingProtocolError
from .._loop import check_count
from ._device import DeviceLike, MemoryKind

__all__ = [
    "CONTROL_BLOCK_SIZE",
    "ERROR_MESSAGE_SIZE",
    "LINE_SIZE",
    "RING_ALIGNMENT",
    "RING_MAGIC",
    "RING_VERSION",
    "ErrorCode",
    "Offset",
    "RingFeature",
    "RingDevice",
    "RingHost",
    "RingLayout",
    "RingMemory",
    "StopMode",
    "coerce_batch",
    "coerce_record",
    "copy_records",
    "describe_dtype",
    "describe_dtypes",
    "record_dtype",
    "records_copy",
    "record_from_mapping",
    "sequenced_slot_size",
]

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


class RingMemory:
    """An initialised ring region and typed views of it.

    Build one with :meth:`allocate` (memory from a backend) or :meth:`from_buffer`.
    ``base`` is a ``uint8`` NumPy view of exactly :attr:`RingLayout.total_size` bytes
    starting at a 64-byte boundary; :attr:`address` is its host address (on CUDA with
    unified addressing, also the device address of mapped memory). ``owner`` is the
    allocation ``base`` was carved from: keep the ``RingMemory`` alive as long as the
    device may touch the region.
    """

    def __init__(self, layout: RingLayout, base: npt.NDArray[np.uint8], owner: Any = None) -> None:
        if base.dtype != _BYTE or base.ndim != 1 or not base.flags.c_contiguous:
            raise TypeError("a ring region must be a contiguous 1-D uint8 array")
        if base.nbytes != layout.total_size:
            raise ValueError(
                f"the ring region has {base.nbytes} bytes but the layout needs {layout.total_size}"
            )
        if base.ctypes.data % RING_ALIGNMENT:
            raise ValueError(f"a ring region must start on a {RING_ALIGNMENT}-byte boundary")
        self.layout = layout
        #: The allocation ``base`` was carved from; ``None`` once :meth:`detach`-ed.
        self.owner: Any = base if owner is None else owner
        self._view(base)

    def _view(self, base: npt.NDArray[np.uint8]) -> None:
        layout = self.layout
        self.base = base
        control = base[:CONTROL_BLOCK_SIZE]
        #: The control block as little-endian u64 and u32 words (index = offset // 8 or // 4).
        self.words64: npt.NDArray[np.uint64] = control.view(_U64)
        self.words32: npt.NDArray[np.uint32] = control.view(_U32)
        self.error_message_bytes: npt.NDArray[np.uint8] = base[
            Offset.ERROR_MESSAGE : Offset.ERROR_MESSAGE + ERROR_MESSAGE_SIZE
        ]
        in_start = layout.in_ring_offset
        in_end = in_start + layout.in_capacity * layout.in_slot_size
        out_start = layout.out_ring_offset
        out_end = out_start + layout.out_capacity * layout.out_slot_size
        ring = base[in_start:in_end]
        #: The requests' bytes in the input slots, as opaque records (strided), when the
        #: slots also hold sequence words; ``None`` otherwise.
        self.in_payloads: npt.NDArray[np.void] | None = None
        #: The input slots' sequence words (``in_capacity`` u64, strided), or ``None``.
        self.in_sequences: npt.NDArray[np.uint64] | None = None
        #: The input slots, as an array of request records (``in_capacity`` long; strided
        #: when the slots also hold sequence words).
        self.in_slots: npt.NDArray[Any]
        sequence = layout.in_sequence_offset
        if sequence is None:
            self.in_slots = ring.view(layout.request_dtype)
        else:
            itemsize = layout.request_dtype.itemsize
            slot = np.dtype(
                {
                    "names": ["payload", "sequence"],
                    "formats": [np.dtype((np.void, itemsize)), _U64],
                    "offsets": [0, sequence],
                    "itemsize": layout.in_slot_size,
                }
            )
            slots = ring.view(slot)
            self.in_payloads = slots["payload"]
            self.in_sequences = slots["sequence"]
            self.in_slots = self.in_payloads.view(layout.request_dtype)
        #: The output slots, as an array of reply records (``out_capacity`` long).
        self.out_slots: npt.NDArray[Any] = base[out_start:out_end].view(layout.reply_dtype)

    def detach(self) -> None:
        """Move the region into a private host copy and let go of the allocation.

        Only once no device side can touch the region again (its kernel has exited):
        the backend's memory is freed as soon as nothing else holds it, instead of
        whenever the garbage collector gets to this object, and reads go on seeing the
        region's last values. Idempotent.
        """
        if self.owner is None:
            return
        copy = np.empty(self.layout.total_size + RING_ALIGNMENT, dtype=_BYTE)
        skip = (-copy.ctypes.data) % RING_ALIGNMENT
        region = copy[skip : skip + self.layout.total_size]
        region[:] = self.base
        self.owner = None
        self._view(region)

    # -- construction ---------------------------------------------------------------

    @classmethod
    def allocate(
        cls, backend: DeviceLike, layout: RingLayout, *, exact: bool = False
    ) -> RingMemory:
        """Allocate a region from ``backend`` (``MemoryKind.MAPPED``) and initialise it.

        The input ring is laid out as the backend prefers: with sequenced input slots
        when its class sets ``ring_sequenced_input = True`` (a device that reads the
        ring across a bus), unless ``exact`` asks for ``layout`` as it is (a link
        between two kernels, whose producer stores no sequence words). The region's
        :attr:`layout` says which.
        """
        if not exact and getattr(backend, "ring_sequenced_input", False):
            layout = layout.with_sequenced_input()
        raw = backend.allocate((layout.total_size + RING_ALIGNMENT,), _BYTE, MemoryKind.MAPPED)
        if not isinstance(raw, np.ndarray):
            raise TypeError(
                f"the {backend.name} backend returned {type(raw).__name__} for mapped memory; "
                "the contract requires a NumPy host view"
            )
        flat = raw.reshape(-1).view(_BYTE)
        skip = (-flat.ctypes.data) % RING_ALIGNMENT
        memory = cls(layout, flat[skip : skip + layout.total_size], owner=raw)
        memory.initialize()
        return memory

    @classmethod
    def from_buffer(cls, layout: RingLayout) -> RingMemory:
        """A region in fresh host memory (tests, tools), initialised."""
        raw = np.zeros(layout.total_size + RING_ALIGNMENT, dtype=_BYTE)
        skip = (-raw.ctypes.data) % RING_ALIGNMENT
        memory = cls(layout, raw[skip : skip + layout.total_size], owner=raw)
        memory.initialize()
        return memory

    def initialize(self) -> None:
        """Zero the whole region and write the header (host, before launch only)."""
        layout = self.layout
        self.base[:] = 0
        self.words32[Offset.MAGIC // 4] = RING_MAGIC
        self.words32[Offset.VERSION // 4] = RING_VERSION
        self.words64[Offset.IN_CAPACITY // 8] = layout.in_capacity
        self.words64[Offset.OUT_CAPACITY // 8] = layout.out_capacity
        self.words64[Offset.IN_SLOT_SIZE // 8] = layout.in_slot_size
        self.words64[Offset.OUT_SLOT_SIZE // 8] = layout.out_slot_size
        self.words64[Offset.IN_RING // 8] = layout.in_ring_offset
        self.words64[Offset.OUT_RING // 8] = layout.out_ring_offset
        self.words64[Offset.TOTAL_SIZE // 8] = layout.total_size
        self.words32[Offset.FEATURES // 4] = int(layout.features)

    # -- access -----------------------------------------------------------------------

    @property
    def address(self) -> int:
        """Host address of the region's first byte."""
        return int(self.base.ctypes.data)

    def load64(self, offset: Offset) -> int:
        """Load the u64 word at ``offset``."""
        return int(self.words64[offset >> 3])

    def load32(self, offset: Offset) -> int:
        """Load the u32 word at ``offset``."""
        return int(self.words32[offset >> 2])

    def error_message(self) -> str:
        """The kernel's error message (empty when it wrote none)."""
        length = min(self.load32(Offset.ERROR_LENGTH), ERROR_MESSAGE_SIZE)
        return bytes(self.error_message_bytes[:length]).decode("utf-8", errors="replace")

    def snapshot(self) -> dict[str, int]:
        """Every index and flag word, for diagnostics and error messages."""
        return {
            "in_head": self.load64(Offset.IN_HEAD),
            "in_tail": self.load64(Offset.IN_TAIL),
            "out_head": self.load64(Offset.OUT_HEAD),
            "out_tail": self.load64(Offset.OUT_TAIL),
            "stop": self.load32(Offset.STOP),
            "pause": self.load32(Offset.PAUSE),
            "started": self.load32(Offset.STARTED),
            "paused": self.load32(Offset.PAUSED),
            "done": self.load32(Offset.DONE),
            "error_code": self.load32(Offset.ERROR_CODE),
            "batches": self.load64(Offset.BATCHES),
        }

    def describe(self) -> str:
        """The snapshot as ``name=value`` pairs."""
        return ", ".join(f"{name}={value}" for name, value in self.snapshot().items())


# -- records ---------------------------------------------------------------------------


def _short_type(dtype: np.dtype[Any]) -> str:
    if dtype.names is not None:
        return describe_dtype(dtype)
    if dtype.subdtype is not None:
        base, shape = dtype.subdtype
        return f"{_short_type(base)}{list(shape)}"
    return dtype.str.lstrip("<|=")  # '<f8' -> 'f8'; a big-endian '>f8' keeps its mark


def describe_dtype(dtype: np.dtype[Any]) -> str:
    """A record dtype as messages print it: a short field list, ``[id: u8, x: f8[3]]``.

    NumPy's own ``str`` of an aligned structured dtype is a dict of names, formats,
    offsets and item size; this says what a reader needs to fix a record. Padding shows
    only where it is the difference: see :func:`describe_dtypes`.
    """
    if dtype.names is None:
        return _short_type(dtype)
    fields = dtype.fields
    assert fields is not None
    return "[" + ", ".join(f"{name}: {_short_type(fields[name][0])}" for name in dtype.names) + "]"


def describe_dtypes(first: np.dtype[Any], second: np.dtype[Any]) -> tuple[str, str]:
    """Two dtypes that differ, for one message: short field lists, each followed by its
    layout (item size and field offsets) when the field lists alone are the same (one
    built with ``align=True``, the other without, say)."""
    texts = describe_dtype(first), describe_dtype(second)
    if texts[0] != texts[1]:
        return texts
    return _with_layout(first), _with_layout(second)


def _with_layout(dtype: np.dtype[Any]) -> str:
    fields = dtype.fields
    offsets = [fields[name][1] for name in dtype.names or ()] if fields else []
    return f"{describe_dtype(dtype)} ({dtype.itemsize} bytes, offsets {offsets})"


def _dtype_mismatch(got: np.dtype[Any], want: np.dtype[Any], what: str) -> RecordError:
    got_text, want_text = describe_dtypes(got, want)
    if got.itemsize > want.itemsize:
        return RecordError(
            f"a {what} record of {got.itemsize} bytes (dtype {got_text}) is larger "
            f"than a {want.itemsize}-byte slot (the ring's record dtype is {want_text})"
        )
    return RecordError(
        f"a {what} record has dtype {got_text}, but the ring's record dtype is {want_text}"
    )


def coerce_record(value: Any, dtype: np.dtype[Any], what: str = "request") -> npt.NDArray[Any]:
    """Turn one record into a 1-element array of ``dtype``, or raise :class:`RecordError`.

    Accepted: a NumPy array or scalar of exactly ``dtype`` holding one record (shape
    ``()`` or ``(1,)``); a ``bytes``-like payload of at most one slot (zero-padded); a
    tuple, a mapping of field names, or a Python scalar NumPy can convert to
    ``dtype``. Arrays of another dtype are refused rather than cast, and the message
    names both dtypes, or both sizes when the record is larger than a slot. Nothing
    is written anywhere: call this before touching a ring.

    Nothing is guessed: a Python scalar is a record only of a dtype with one field (or
    none), and a number that a cast would change (1.7 into an integer field) is refused
    naming the field; exact conversions (2.0 into an integer field) are made.
    """
    is_tuple = type(value) is tuple
    if is_tuple:  # the common case first: field values
        pass
    elif isinstance(value, np.ndarray | np.generic):
        array = np.asarray(value)
        if array.dtype != dtype:
            raise _dtype_mismatch(array.dtype, dtype, what)
        if array.shape not in ((), (1,)):
            raise RecordError(
                f"expected one {what} record, got an array of shape {array.shape}; "
                "send several records as a batch"
            )
        return array.reshape(1)
    if isinstance(value, bytes | bytearray | memoryview):
        payload = memoryview(value).cast("B")
        if payload.nbytes > dtype.itemsize:
            raise RecordError(
                f"a {what} payload of {payload.nbytes} bytes is larger than a "
                f"{dtype.itemsize}-byte slot (record dtype {describe_dtype(dtype)})"
            )
        raw = np.zeros(dtype.itemsize, dtype=_BYTE)
        raw[: payload.nbytes] = np.frombuffer(payload, dtype=_BYTE)
        return raw.view(dtype)
    elif isinstance(value, Mapping):
        value = record_from_mapping(value, dtype, what)
    plan = _plans.get(id(dtype)) or _plan(dtype)
    if plan[1] and not is_tuple and not isinstance(value, tuple | list):
        # NumPy would copy the scalar into every field: a guess, never what was meant.
        names = dtype.names
        assert names is not None
        raise RecordError(
            f"{value!r} is not a {what} record of dtype {describe_dtype(dtype)}: it has "
            f"{len(names)} fields "
            f"({', '.join(names)}); give a tuple of field values or a mapping of field "
            "names (a scalar is a record only of a one-field dtype)"
        )
    if is_tuple or isinstance(value, list):
        for item in value:
            if type(item) not in _PLAIN_NUMBERS:  # the common case costs one look per field
                _refuse_text(value, dtype, dtype, None, what)
                break
    elif type(value) not in _PLAIN_NUMBERS:
        _refuse_text(value, dtype, dtype, None, what)
    try:
        array = np.array([value], dtype=dtype)
    except (TypeError, ValueError, OverflowError) as exc:
        raise RecordError(
            f"cannot make a {what} record of dtype {describe_dtype(dtype)} from {value!r}: {exc}"
        ) from None
    if array.shape != (1,):
        raise RecordError(
            f"{value!r} is not one {what} record of dtype {describe_dtype(dtype)} "
            f"(it converts to shape {array.shape[1:]})"
        )
    integer_fields = plan[2]
    if integer_fields:
        if is_tuple:  # plain ints need no check (NumPy range-checks them)
            for position, _ in integer_fields:
                if position < len(value) and type(value[position]) is not int:
                    _check_exact(value, array, dtype, integer_fields, what)
                    break
        else:
            _check_exact(value, array, dtype, integer_fields, what)
    return array


#: Values that are numbers and nothing else: no text to look for in them.
_PLAIN_NUMBERS: Final = frozenset({int, float, bool, complex})


def _refuse_text(
    value: Any, field: np.dtype[Any], dtype: np.dtype[Any], name: str | None, what: str
) -> None:
    """Refuse text (``str``, ``bytes``) bound for a number of ``field`` (the record's
    ``dtype`` or a field ``name`` of it, nested fields and subarrays included): NumPy
    would parse ``"2.0"`` into a float field, and a record is never guessed at."""
    if field.names is not None:
        fields = field.fields
        assert fields is not None
        if isinstance(value, tuple | list):
            for key, item in zip(field.names, value, strict=False):
                _refuse_text(item, fields[key][0], dtype, key, what)
        elif len(field.names) == 1:  # a scalar is the record of a one-field dtype
            key = field.names[0]
            _refuse_text(value, fields[key][0], dtype, key, what)
        return
    if isinstance(value, tuple | list):  # a subarray field's elements
        for item in value:
            _refuse_text(item, field.base, dtype, name, what)
        return
    is_text = isinstance(value, str | bytes) or (
        isinstance(value, np.ndarray) and value.dtype.kind in "SU"
    )
    if is_text and field.base.kind in "biufc":
        where = f"a {what} record of dtype {describe_dtype(dtype)}"
        if name is not None:
            where = f"field {name!r} ({field}) of {where}"
        raise RecordError(
            f"{where}: {value!r} is text, and text is never parsed into a number; "
            "give the number itself"
        )


_IntegerFields = tuple[tuple[int, str | None], ...]
#: What coerce_record needs to know of a dtype: the dtype itself (kept alive, so its id
#: is not reused while cached), whether it has several fields, and its integer fields.
_Plan = tuple[np.dtype[Any], bool, _IntegerFields]

# Plans by the dtype object's identity (hashing a structured dtype costs more than the
# whole check): a kernel's dtype is one object, used for every record.
_plans: dict[int, _Plan] = {}


def _plan(dtype: np.dtype[Any]) -> _Plan:
    """Make and cache ``dtype``'s plan. Its integer fields are the integer and bool
    fields (position and name; ``None`` for an unstructured integer dtype): where a
    cast can lose what a Python value held."""
    if dtype.names is None:
        found: _IntegerFields = ((0, None),) if dtype.base.kind in "iub" else ()
    else:
        fields = dtype.fields
        assert fields is not None
        found = tuple(
            (position, name)
            for position, name in enumerate(dtype.names)
            if fields[name][0].base.kind in "iub"
        )
    plan = (dtype, dtype.names is not None and len(dtype.names) > 1, found)
    if len(_plans) >= 256:
        _plans.clear()
    _plans[id(dtype)] = plan
    return plan


def _check_exact(
    value: Any,
    array: npt.NDArray[Any],
    dtype: np.dtype[Any],
    integer_fields: _IntegerFields,
    what: str,
) -> None:
    """Refuse a non-integral number (1.7) cast into an integer or bool field, where
    NumPy would silently truncate it; exact values (2.0, ``True``) pass."""
    for position, name in integer_fields:
        if name is None or not isinstance(value, tuple | list):
            item = value  # an unstructured dtype's value, or a one-field dtype's
        elif position < len(value):
            item = value[position]
        else:
            continue  # NumPy refused a short tuple already
        if type(item) is int or isinstance(item, bool | np.integer | np.bool_):
            continue  # NumPy range-checks integers itself
        converted = array[0] if name is None else array[0][name]
        try:
            original = np.asarray(item)
        except Exception:  # NumPy converted it already: nothing to compare
            continue
        if original.dtype.kind not in "fc":
            continue
        with np.errstate(invalid="ignore"):
            exact = original.shape == np.shape(converted) and bool(np.all(original == converted))
        if not exact:
            if name is None:
                where = f"a {what} record of dtype {describe_dtype(dtype)}"
            else:
                fields = dtype.fields
                assert fields is not None
                where = (
                    f"field {name!r} ({fields[name][0]}) of a {what} record "
                    f"of dtype {describe_dtype(dtype)}"
                )
            raise RecordError(
                f"{where}: {item!r} would lose information cast into it (it would become "
                f"{converted!r}); round it yourself if that is meant"
            )


def record_from_mapping(
    value: Mapping[str, Any], dtype: np.dtype[Any], what: str
) -> tuple[Any, ...]:
    """The field values of ``value`` (a mapping of field names) in ``dtype``'s order.

    Raises :class:`~pdc_core.RecordError` naming missing and unknown fields.
    """
    names = dtype.names
    if names is None:
        raise RecordError(
            f"a mapping cannot be a {what} record of the unstructured dtype {describe_dtype(dtype)}"
        )
    missing = [name for name in names if name not in value]
    extra = [name for name in value if name not in names]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing field(s) {', '.join(missing)}")
        if extra:
            parts.append(f"unknown field(s) {', '.join(map(str, extra))}")
        raise RecordError(f"a {what} record of dtype {describe_dtype(dtype)}: {'; '.join(parts)}")
    return tuple(value[name] for name in names)


def coerce_batch(values: Any, dtype: np.dtype[Any], what: str = "request") -> npt.NDArray[Any]:
    """Turn a batch into a 1-D array of ``dtype``, or raise :class:`RecordError`.

    Accepted: a 1-D NumPy array of exactly ``dtype`` (used as is, no copy), or a
    sequence of records each accepted by :func:`coerce_record`. Every record is
    validated before this returns, so a bad record anywhere means nothing is sent.
    """
    if isinstance(values, np.ndarray):
        if values.dtype != dtype:
            raise _dtype_mismatch(values.dtype, dtype, what)
        if values.ndim != 1:
            raise RecordError(
                f"a batch of {what} records must be a 1-D array, got shape {values.shape}"
            )
        return values
    if isinstance(values, bytes | bytearray | memoryview | str) or not isinstance(values, Sequence):
        raise RecordError(
            f"a batch of {what} records must be a 1-D array of dtype {describe_dtype(dtype)} "
            f"or a sequence of records, not {type(values).__name__}"
        )
    out = np.empty(len(values), dtype=dtype)
    for index, value in enumerate(values):
        try:
            out[index] = coerce_record(value, dtype, what)[0]
        except RecordError as exc:
            raise RecordError(f"record {index} of the batch: {exc}") from None
    return out


def copy_records(destination: npt.NDArray[Any], source: npt.NDArray[Any]) -> None:
    """``destination[...] = source`` for two 1-D record arrays of one dtype and length.

    Large contiguous runs are copied as bytes, in one ``memcpy``: NumPy copies a
    structured array field by field, about 25x slower for the ring's small records (a
    16-byte record: 64 us against 2.6 us per 16,384 records on a 2-core VM). Short
    runs, where making the byte views costs more than the copy, are assigned -- except
    records with padding: a field-by-field copy leaves the destination's padding as it
    was (``np.empty``'s leftovers: heap bytes of this process), so they are always
    copied as bytes, carrying the source's padding (zero in ring slots: the device
    sides zero it, ``docs/ring-protocol.md`` section 7).
    """
    if destination.dtype != source.dtype or len(destination) != len(source):
        raise ValueError(
            f"cannot copy {source.shape} records of {source.dtype} into "
            f"{destination.shape} of {destination.dtype}"
        )
    if (
        (len(source) >= _BYTE_COPY_MIN or _padded(source.dtype))
        and destination.flags.c_contiguous
        and source.flags.c_contiguous
    ):
        destination.view(np.uint8)[...] = source.view(np.uint8)
    else:
        destination[...] = source


#: Records from which :func:`copy_records` copies bytes (below, assignment is cheaper).
_BYTE_COPY_MIN: Final = 128


@functools.cache
def _padded(dtype: np.dtype[Any]) -> bool:
    """Whether some byte of a ``dtype`` record belongs to no field (nested included)."""

    def covered(dtype: np.dtype[Any]) -> int:
        if dtype.subdtype is not None:
            inner, shape = dtype.subdtype
            return covered(inner) * int(np.prod(shape, dtype=np.int64))
        if dtype.fields is None:
            return dtype.itemsize
        return sum(covered(field[0]) for field in dtype.fields.values())

    return covered(dtype) < dtype.itemsize


def records_copy(source: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """A new array holding a copy of the 1-D record array ``source`` (as fast as
    :func:`copy_records`; padding copied as :func:`copy_records` says)."""
    if len(source) < _BYTE_COPY_MIN and not _padded(source.dtype):
        return source.copy()
    copy = np.empty(len(source), source.dtype)
    copy_records(copy, source)
    return copy


# -- the host endpoint ---------------------------------------------------------------------


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
        self.in_head = memory.load64(Offset.IN_HEAD)
        self.out_tail = memory.load64(Offset.OUT_TAIL)
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
        reply = self._out_slots[tail % self._out_cap].copy()  # a scalar, not a view
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


# -- the device endpoint (reference implementation) ---------------------------------------


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
