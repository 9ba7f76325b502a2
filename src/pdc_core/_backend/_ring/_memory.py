"""Ring memory: an initialised ring region and typed views of its words and slots.

:class:`RingMemory` allocates (from a backend, ``MAPPED``) or wraps a region, writes
its header, and gives both ends their views. It stores no index or control word after
:meth:`RingMemory.initialize`: the host end (:mod:`._host`) and the device end
(:mod:`._device`) do.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from .._device import DeviceLike, MemoryKind
from ._layout import (
    _BYTE,
    _U32,
    _U64,
    CONTROL_BLOCK_SIZE,
    ERROR_MESSAGE_SIZE,
    RING_ALIGNMENT,
    RING_MAGIC,
    RING_VERSION,
    Offset,
    RingLayout,
)


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
