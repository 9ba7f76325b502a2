"""The ring protocol of persistent kernels, shared by every backend.

One contiguous region of memory the host and the device both address (``MAPPED``
memory: pinned host memory the GPU reads on CUDA, ordinary host memory on the CPU)
holds a *control block* of 64-byte lines followed by two rings of fixed-size slots:
the input ring (requests, host -> kernel) and the output ring (replies, kernel ->
host). Every word of the control block is written by exactly one side; each side only
loads and stores (no read-modify-write crosses the host/device boundary). Indices are
64-bit, start at 0 and only grow; the slot of index ``i`` is ``i % capacity``.

``docs/ring-protocol.md`` is the normative description (byte offsets, who writes
what, memory ordering, the start/stop/pause/error handshakes). This package holds it
by role, each module importing only those listed before it:

* :mod:`._layout`: the constants that document refers to, the control block's words
  and values, and :class:`RingLayout` (offsets for a pair of record dtypes and
  capacities);
* :mod:`._records`: converting what callers give into records, copying records;
* :mod:`._memory`: :class:`RingMemory`, an initialised region and its views;
* :mod:`._host`: :class:`RingHost`, the host end and the only writer of the host's
  words (``IN_HEAD``, ``OUT_TAIL``, ``STOP``, ``PAUSE``);
* :mod:`._device`: :class:`RingDevice`, the reference device end in Python, which
  the CPU backend runs in its worker thread and the protocol tests drive step by step.

A layout may ask for *sequenced input slots* (``RingLayout(..., sequenced_input=True)``,
the ``FEATURES`` word): each input slot then carries, in the record's own cache line, a
sequence word the host stores after the record, so a device across a bus can see that
a request is there, and read it, with one read of one line. The host still publishes
``IN_HEAD``; a device may poll either.

Neither endpoint blocks or waits: they report what is possible now, and the callers
(the async host session, a backend's worker) decide how to wait.
"""

from ._device import RingDevice
from ._host import RingHost
from ._layout import (
    CONTROL_BLOCK_SIZE,
    ERROR_MESSAGE_SIZE,
    LINE_SIZE,
    RING_ALIGNMENT,
    RING_MAGIC,
    RING_VERSION,
    ErrorCode,
    Offset,
    RingFeature,
    RingLayout,
    StopMode,
    record_dtype,
    sequenced_slot_size,
)
from ._memory import RingMemory
from ._records import (
    coerce_batch,
    coerce_record,
    copy_records,
    describe_dtype,
    describe_dtypes,
    record_from_mapping,
    records_copy,
)

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
