"""``UnifiedBuffer``: one array with a host view and a device view, synchronized lazily.

A buffer takes memory on first use: ``UnifiedBuffer(shape)`` only checks the shape and
dtype, and the first access to its data (``buf.host``, ``buf.device``, ``buf[i]``,
``fill``, ...) or :meth:`UnifiedBuffer.allocate` allocates zero-filled host memory.
:meth:`UnifiedBuffer.free` gives the memory back and the buffer starts over (the next
use allocates afresh); :meth:`UnifiedBuffer.close` gives it back for good.

The state machine (``BufferState``)::

    UNINITIALIZED no memory yet (or freed); marking a copy dirty raises
                  BufferNotAllocatedError, any access to the data allocates
    HOST_ONLY     host memory only; the device copy is made on first device access
    DEVICE_ONLY   device memory only (a buffer built from a device array)
    SYNCHRONIZED  both copies hold the same data (always the case on backends with
                  unified memory, where the device view *is* the host memory)
    HOST_DIRTY    the host copy may be newer; the next device access copies it over
    DEVICE_DIRTY  the device copy may be newer; the next host access copies it back

Taking ``buf.host`` assumes the caller may write through it and marks the host copy
dirty, so a write through ``buf.host[...]`` is never lost by a later device read;
likewise ``buf.device`` marks the device copy dirty. Read-only access that leaves the
state alone goes through :meth:`UnifiedBuffer.host_readonly`. Keep no host array
across device work: take ``buf.host`` again afterwards.
"""

from __future__ import annotations

import enum
import math
import operator
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, SupportsIndex

import numpy as np
import numpy.typing as npt

from ._backend._contract import Backend, Capability, MemoryKind, wait_shielded_on_cancel
from ._exceptions import BackendUnavailable, BufferNotAllocatedError
from ._loop import current_kit, full_checkpoint
from ._plugins import backend_registrations, get_backend, resolve_backend

if TYPE_CHECKING:
    from ._backend._contract import Stream

__all__ = [
    "BufferState",
    "ShapeLike",
    "UnifiedBuffer",
    "normalize_shape_dtype",
    "zero_fill",
]

ShapeLike = SupportsIndex | Sequence[SupportsIndex]


class _ReadOnlyBase:
    """A read-only view's base: NumPy lets no array over it be made writable again.

    NumPy collapses chains of array bases, so a read-only ndarray between a view and
    its writable owner would be skipped and ``view.flags.writeable = True`` allowed; a
    base that is not an array and exports its memory as read-only is never skipped.
    """

    __slots__ = ("__array_interface__", "owner")

    def __init__(self, owner: npt.NDArray[Any]) -> None:
        self.owner = owner  # keeps the memory alive for as long as a view lives
        self.__array_interface__ = {
            "data": (owner.ctypes.data, True),
            "shape": (owner.nbytes,),
            "typestr": "|u1",
            "version": 3,
        }


def _readonly_view(host: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """A view of the C-contiguous ``host`` that cannot be made writable."""
    raw: npt.NDArray[Any] = np.asarray(_ReadOnlyBase(host))
    return raw.view(host.dtype).reshape(host.shape)


def normalize_shape_dtype(
    shape: ShapeLike, dtype: npt.DTypeLike
) -> tuple[tuple[int, ...], np.dtype[Any]]:
    """Validate a shape and dtype and return them in canonical form.

    A subarray dtype gives its base dtype with its shape appended (``(3,)`` of
    ``(int16, (3,))`` is ``(3, 3)`` of ``int16``), as NumPy's arrays have them.
    Raises ``TypeError`` for a shape that is not made of integers or a dtype that
    NumPy does not know or that cannot live in device memory (object, or flexible
    without a size), and ``ValueError`` for a negative dimension or for an array too
    large for NumPy to index (more than ``2**63 - 1`` bytes on a 64-bit machine;
    the message names the shape, the dtype and the byte count); each message names
    the offending value. Sizes are computed with Python integers, so they never wrap.
    """
    normalized, canonical = _normalize_shape_dtype(shape, dtype)
    _check_nbytes(normalized, canonical)
    return normalized, canonical


#: The most bytes (and elements) one NumPy array can span: ``2**63 - 1`` on 64-bit.
_MAX_ARRAY_BYTES: Final = int(np.iinfo(np.intp).max)


def _nbytes(shape: tuple[int, ...], dtype: np.dtype[Any]) -> int:
    """The exact byte size of an array of ``shape`` and ``dtype`` (a Python int)."""
    return math.prod(shape) * dtype.itemsize


def _check_nbytes(shape: tuple[int, ...], dtype: np.dtype[Any]) -> int:
    """The byte size of ``shape`` x ``dtype``; ``ValueError`` if NumPy cannot index it.

    NumPy requires the item size times the product of the *nonzero* dimensions to fit
    in an ``intp`` (so even an empty array cannot have an enormous dimension).
    """
    nbytes = _nbytes(shape, dtype)
    span = math.prod(extent or 1 for extent in shape) * dtype.itemsize
    if span > _MAX_ARRAY_BYTES:
        if nbytes == span:
            needs = f"needs {nbytes} bytes ({math.prod(shape)} elements of {dtype.itemsize} bytes)"
        else:
            needs = f"spans {span} bytes in its nonzero dimensions (it holds no elements)"
        raise ValueError(
            f"shape {shape} of dtype {dtype} {needs}; an array can span at most "
            f"{_MAX_ARRAY_BYTES} bytes"
        )
    return nbytes


def _normalize_shape_dtype(
    shape: ShapeLike, dtype: npt.DTypeLike
) -> tuple[tuple[int, ...], np.dtype[Any]]:
    """:func:`normalize_shape_dtype` without the size check (the pool checks its limit first)."""
    if isinstance(shape, SupportsIndex) and not isinstance(shape, bool):
        dims: tuple[Any, ...] = (shape,)
    elif isinstance(shape, Sequence) and not isinstance(shape, str | bytes):
        dims = tuple(shape)
    else:
        raise TypeError(f"shape must be an int or a sequence of ints, not {shape!r}")
    normalized = []
    for dim in dims:
        if isinstance(dim, bool):
            raise TypeError(f"shape {shape!r} contains a bool, not an int")
        try:
            value = operator.index(dim)
        except TypeError:
            raise TypeError(f"shape {shape!r} contains {dim!r}, which is not an int") from None
        if value < 0:
            raise ValueError(f"shape {shape!r} has a negative dimension {value}")
        normalized.append(value)
    try:
        canonical = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"dtype {dtype!r} is not a NumPy dtype: {exc}") from None
    if canonical.hasobject:
        raise TypeError(f"dtype {canonical} holds Python objects, which cannot live on a device")
    if canonical.itemsize == 0:
        raise TypeError(f"dtype {canonical} has no size; give one, such as 'U8' or 'S16'")
    if canonical.subdtype is not None:
        # A subarray dtype (int16, (3,)) is its shape appended, as NumPy makes arrays.
        base, inner = canonical.subdtype
        return (*normalized, *inner), base
    return tuple(normalized), canonical


def zero_fill(array: npt.NDArray[Any]) -> None:
    """Every byte of ``array`` zero, whatever its dtype (``fill(0)`` refuses raw bytes
    ``V5`` and records holding them)."""
    array[...] = np.zeros((), array.dtype)


class BufferState(enum.Enum):
    """Which copies of a :class:`UnifiedBuffer` hold current data."""

    UNINITIALIZED = "uninitialized"
    HOST_ONLY = "host_only"
    DEVICE_ONLY = "device_only"
    SYNCHRONIZED = "synchronized"
    HOST_DIRTY = "host_dirty"
    DEVICE_DIRTY = "device_dirty"


class UnifiedBuffer:
    """An n-dimensional array with host and device views and lazy synchronization.

    ``UnifiedBuffer(shape, dtype=np.float32, pinned=False, backend=None)`` is a buffer
    on ``backend`` (a name such as ``"cuda:1"``, a backend instance, or ``None`` for the
    default) whose zero-filled host memory (page-locked when ``pinned``) is allocated
    on first use or by :meth:`allocate`; device memory on first device use. An integer
    ``shape`` is one dimension. Thread-safe: state changes happen under a lock.

    It speaks NumPy (``np.asarray(buf)`` is the host view, without a copy), DLPack
    (the device view on a discrete GPU, the host view otherwise), the Python buffer
    protocol on Python 3.12+ (``memoryview(buf)``), and ``__cuda_array_interface__``
    where the device memory is CUDA's.
    """

    def __init__(
        self,
        shape: ShapeLike,
        dtype: npt.DTypeLike = np.float32,
        pinned: bool = False,
        backend: Backend | str | None = None,
    ) -> None:
        shape, dtype = normalize_shape_dtype(shape, dtype)
        self._init(resolve_backend(backend), pinned, shape, dtype)

    @classmethod
    def from_array(
        cls, array: npt.ArrayLike, *, backend: Backend | str | None = None, pinned: bool = False
    ) -> UnifiedBuffer:
        """Wrap a host array; without a copy when it is a C-contiguous NumPy array.

        A copy is made when the array is not contiguous, not writeable, must move
        into pinned memory, or is memory the backend cannot view (MLX, under the metal
        backend, can only view memory it allocated). Anything NumPy can convert
        (lists, DLPack host tensors, objects with ``__array__``) is accepted.
        """
        host = np.asarray(array)
        self = cls.__new__(cls)
        self._init(resolve_backend(backend), pinned, *normalize_shape_dtype(host.shape, host.dtype))
        viewable = not self._unified or self._backend.can_view(host)
        if pinned or not (host.flags.c_contiguous and host.flags.writeable and viewable):
            copy = self._allocate_host(host.shape, host.dtype)
            np.copyto(copy, host)
            host = copy
        self._attach_host(host)
        return self

    def _init(
        self, backend: Backend, pinned: bool, shape: tuple[int, ...], dtype: np.dtype[Any]
    ) -> None:
        self._shape: tuple[int, ...] = shape
        self._dtype = dtype
        self._host: npt.NDArray[Any] | None = None
        self._state = BufferState.UNINITIALIZED
        self._closed = False
        self._backend = backend
        self._pinned = bool(pinned)
        self._unified = backend.has(Capability.UNIFIED_MEMORY)
        self._lock = threading.RLock()
        self._device: Any = None
        if pinned and not self._unified:
            backend.require(Capability.PINNED_MEMORY, "allocate pinned host memory")

    def _allocate_host(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> npt.NDArray[Any]:
        kind = MemoryKind.PINNED if self._pinned else MemoryKind.HOST
        try:
            host: npt.NDArray[Any] = self._backend.allocate(shape, dtype, kind)
        except MemoryError as exc:  # the backend's own type (NumPy's, CuPy's) is kept
            exc.add_note(
                f"while allocating a UnifiedBuffer of shape {shape} and dtype {dtype} "
                f"({_nbytes(shape, dtype)} bytes) on {self._backend.qualified_name}"
            )
            raise
        return host

    def _attach_host(self, host: npt.NDArray[Any], view: bool = True) -> None:
        """Take the new host memory in; on a unified-memory backend with ``view``, its
        device view too (the device copy of a discrete backend is made on first use)."""
        self._host = host
        self._state = BufferState.HOST_ONLY
        if view and self._unified:
            self._device = self._backend.device_view(host)
            self._state = BufferState.SYNCHRONIZED

    def _allocated_host(self, view: bool = True) -> npt.NDArray[Any]:
        """The host memory, allocated (zero-filled) on first use. Hold the lock."""
        self._check_open()
        if self._host is None:
            host = self._allocate_host(self._shape, self._dtype)
            zero_fill(host)
            self._attach_host(host, view)
            return host
        return self._host

    # -- memory -----------------------------------------------------------------------

    @property
    def is_allocated(self) -> bool:
        """Whether the buffer holds memory (false before first use, after free or close)."""
        return self._host is not None

    def allocate(self, *, host: bool = True, device: bool = True) -> UnifiedBuffer:
        """Allocate the memory now rather than on first use; returns the buffer.

        The host memory is zero-filled; with ``device`` the device copy is made too
        (on a unified-memory backend: the device view), so the state is
        ``SYNCHRONIZED``, else ``HOST_ONLY``. On a buffer that has memory already it
        keeps the data and only adds the device copy if asked. ``host=False`` is a
        ``ValueError``: a UnifiedBuffer's data always has a host copy.
        """
        if not host:
            raise ValueError(
                "allocate(host=False): a UnifiedBuffer always has host memory; "
                "allocate(device=False) leaves the device copy for its first use"
            )
        with self._lock:
            self._allocated_host(view=device)
            if device:
                self._push()
        return self

    def free(self) -> None:
        """Give the memory back; the buffer is ``UNINITIALIZED`` and can be used again.

        Unlike :meth:`close`, the buffer stays usable: its next use allocates fresh,
        zero-filled memory. The memory goes back once no array taken from :attr:`host`
        or :attr:`device` is still alive. Raises ``ValueError`` on a closed buffer.
        """
        with self._lock:
            self._check_open()
            self._host = None
            self._device = None
            self._state = BufferState.UNINITIALIZED

    # -- description ---------------------------------------------------------------

    @property
    def shape(self) -> tuple[int, ...]:
        """The buffer's shape, as given when it was made."""
        return self._shape

    @property
    def dtype(self) -> np.dtype[Any]:
        """The NumPy dtype of its elements."""
        return self._dtype

    @property
    def size(self) -> int:
        """The number of elements."""
        return math.prod(self._shape)

    @property
    def nbytes(self) -> int:
        """Bytes of one copy of the data (host or device)."""
        return math.prod(self._shape) * self._dtype.itemsize

    @property
    def ndim(self) -> int:
        """The number of dimensions."""
        return len(self._shape)

    @property
    def pinned(self) -> bool:
        """Whether the host copy is page-locked (``pinned=True`` when it was made)."""
        return self._pinned

    @property
    def backend(self) -> Backend:
        """The backend that owns the device copy."""
        return self._backend

    @property
    def state(self) -> BufferState:
        """Which copies are current; see the module documentation."""
        return self._state

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-dimensional UnifiedBuffer")
        return self._shape[0]

    def __repr__(self) -> str:
        pinned = ", pinned" if self._pinned else ""
        return (
            f"UnifiedBuffer(shape={self.shape}, dtype={self.dtype}{pinned}, "
            f"backend={self._backend.qualified_name!r}, state={self._state.name})"
        )

    # -- views and synchronization ----------------------------------------------------

    @property
    def host(self) -> npt.NDArray[Any]:
        """The host array, current; marks the host copy dirty (you may write to it)."""
        with self._lock:
            host = self._allocated_host()
            self._pull()
            if self._device is not None and not self._unified:
                self._state = BufferState.HOST_DIRTY
            return host

    def host_readonly(self) -> npt.NDArray[Any]:
        """A read-only view of the current host data; leaves both copies clean."""
        with self._lock:
            host = self._allocated_host()
            self._pull()
            return _readonly_view(host)

    @property
    def device(self) -> Any:
        """The device array, current; marks the device copy dirty (kernels may write it).

        On a unified-memory backend this is a view of the host memory itself, made
        afresh on each access (an MLX array is a value: rebinding one the caller holds
        must not detach the buffer's later views).
        """
        with self._lock:
            host = self._allocated_host()
            if self._unified:
                self._push()
                return self._backend.device_view(host)
            self._push()
            if not self._unified:
                self._state = BufferState.DEVICE_DIRTY
            return self._device

    @property
    def metal(self) -> Any:
        """An MLX array of the data, through the ``metal`` backend (``pip install pdc-metal``).

        On a metal buffer it shares the host memory (see :attr:`device`). On a buffer
        of another backend MLX cannot view the memory, so it is a copy: a snapshot of
        the current data that later writes on either side do not reach.
        """
        if self._backend.name == "metal":
            return self.device
        if "metal" not in backend_registrations():
            raise BackendUnavailable(
                "UnifiedBuffer.metal needs the metal backend, which is not installed: "
                "pip install pdc-metal"
            )
        return get_backend("metal").to_device(self.host_readonly())

    def sync_to_device(self, stream: Stream | None = None) -> None:
        """Make the device copy current (copying only if the host copy is newer).

        With a ``stream`` the copy is queued on it; wait for the stream before the
        host memory is written again.
        """
        with self._lock:
            self._allocated_host()
            self._push(stream)

    def sync_to_host(self, stream: Stream | None = None) -> None:
        """Make the host copy current (copying only if the device copy is newer)."""
        with self._lock:
            self._allocated_host()
            self._pull(stream)

    async def sync_to_host_async(self, stream: Stream | None = None) -> None:
        """:meth:`sync_to_host` without blocking the event loop.

        The copy is queued on ``stream`` (default: a new stream of the buffer's backend,
        closed afterwards) and the stream is awaited; errors of its work are raised
        here. A cancelled wait still waits, shielded, for the copy it queued.
        """
        await full_checkpoint(current_kit())  # on every path, as trio's API
        own = stream is None
        queue = self._backend.create_stream() if stream is None else stream
        try:
            with self._lock:
                host = self._allocated_host()
                if self._state not in (BufferState.DEVICE_DIRTY, BufferState.DEVICE_ONLY):
                    return
                self._backend.to_host(self._device, out=host, stream=queue)
            await wait_shielded_on_cancel(queue)
            queue.synchronize()  # done already: raises what the copy raised, if anything
            with self._lock:
                # Unless free() gave that memory back meanwhile, or a synchronous use
                # settled the state already (a write through .host may have made it
                # HOST_DIRTY, which must stay).
                dirty = (BufferState.DEVICE_DIRTY, BufferState.DEVICE_ONLY)
                if self._host is host and self._state in dirty:
                    self._state = BufferState.SYNCHRONIZED
        finally:
            if own:
                queue.close()

    def synchronize(self) -> None:
        """Make both copies current: the newer one is copied over the older one.

        Does nothing on a buffer without memory, or whose copies agree already.
        """
        with self._lock:
            self._check_open()
            if self._state in (BufferState.DEVICE_DIRTY, BufferState.DEVICE_ONLY):
                self._pull()
            elif self._state is BufferState.HOST_DIRTY:
                self._push()

    async def ensure_on_host(self) -> None:
        """:meth:`sync_to_host_async` on a stream of its own (PyDotCompute's name).

        Cancelled, it still waits, shielded, for a copy it queued (as that method).
        """
        await self.sync_to_host_async()

    async def ensure_on_device(self) -> None:
        """Make the device copy current (:meth:`sync_to_device`), after a checkpoint.

        Cancellation is seen at the checkpoint only, before any copy starts; the copy
        itself is synchronous.
        """
        await full_checkpoint(current_kit())  # on every path, as trio's API
        self.sync_to_device()

    # -- data -------------------------------------------------------------------------

    def __getitem__(self, key: Any) -> Any:
        """``buf[key]``: read the current host data (a slice is a read-only view)."""
        return self.host_readonly()[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        """``buf[key] = value``: write the host data (as ``buf.host[key] = value``)."""
        self.host[key] = value

    def copy_from(self, source: npt.ArrayLike) -> UnifiedBuffer:
        """Copy ``source`` into the host data (NumPy's broadcasting and casting rules,
        ``np.copyto``: a ``ValueError`` or ``TypeError`` from NumPy when it does not
        fit); returns the buffer."""
        np.copyto(self.host, np.asarray(source), casting="same_kind")
        return self

    def copy_to(self, destination: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """Copy the current data into the NumPy array ``destination``; returns it."""
        np.copyto(destination, self.host_readonly(), casting="same_kind")
        return destination

    def fill(self, value: Any) -> UnifiedBuffer:
        """Set every element to ``value`` (through the host copy); returns the buffer."""
        self.host.fill(value)
        return self

    def zeros(self) -> UnifiedBuffer:
        """Set every element to zero (every byte: records and raw bytes too); returns
        the buffer."""
        zero_fill(self.host)
        return self

    # -- lifetime ---------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def close(self) -> None:
        """Give the buffer's memory back now, not when the buffer is collected.

        Host and device memory go back to the backend (or its pool) once no array
        taken from :attr:`host` or :attr:`device` is still alive. Afterwards every use
        of the buffer raises ``ValueError``. Idempotent; ``with UnifiedBuffer(...) as
        buf:`` closes it at the end of the block.
        """
        with self._lock:
            self._closed = True
            self._host = None  # the memory itself goes back
            self._device = None

    def __enter__(self) -> UnifiedBuffer:
        self._check_open()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"this UnifiedBuffer of shape {self._shape} is closed")

    def mark_host_dirty(self) -> None:
        """Declare that the host copy was written (through an array kept from earlier).

        Raises ``ValueError`` on a closed buffer, as every other use after :meth:`close`.
        """
        with self._lock:
            self._check_allocated()
            if self._device is not None and not self._unified:
                self._state = BufferState.HOST_DIRTY

    def mark_device_dirty(self) -> None:
        """Declare that the device copy was written.

        Raises ``ValueError`` on a closed buffer, as every other use after :meth:`close`.
        """
        with self._lock:
            self._check_allocated()
            if not self._unified:
                self._push()
                self._state = BufferState.DEVICE_DIRTY

    def _check_allocated(self) -> None:
        # A buffer without memory has no copy that could have been written.
        self._check_open()
        if self._host is None:
            raise BufferNotAllocatedError()

    def _push(self, stream: Stream | None = None) -> None:
        host = self._host
        if host is None:  # no data yet: nothing to copy
            return
        if self._unified:
            if self._state is BufferState.HOST_ONLY:  # the device view is the host memory
                self._device = self._backend.device_view(host)
                self._state = BufferState.SYNCHRONIZED
            return
        if self._device is None:
            self._device = self._backend.to_device(host, stream=stream)
            self._state = BufferState.SYNCHRONIZED
        elif self._state in (BufferState.HOST_DIRTY, BufferState.HOST_ONLY):
            self._backend.to_device(host, out=self._device, stream=stream)
            self._state = BufferState.SYNCHRONIZED

    def _pull(self, stream: Stream | None = None) -> None:
        if self._state in (BufferState.DEVICE_DIRTY, BufferState.DEVICE_ONLY):
            self._backend.to_host(self._device, out=self._host, stream=stream)
            if stream is not None:
                stream.synchronize()
            self._state = BufferState.SYNCHRONIZED

    # -- copying ----------------------------------------------------------------------

    def __reduce_ex__(self, protocol: SupportsIndex) -> Any:
        # copy.copy, copy.deepcopy and pickle all come here. A buffer is memory on a
        # backend (with a lock and maybe a device copy): copying the object would share
        # or lose that, so say how to copy the data instead.
        raise TypeError(
            "a UnifiedBuffer cannot be copied or pickled (it owns host and device memory "
            "on its backend): copy its data with numpy.array(buf) (a NumPy array) or "
            "UnifiedBuffer.from_array(numpy.array(buf)) (a new buffer), and pickle that"
        )

    # -- interoperability -------------------------------------------------------------

    def __array__(
        self, dtype: npt.DTypeLike | None = None, copy: bool | None = None
    ) -> npt.NDArray[Any]:
        host = self.host
        if copy or (dtype is not None and np.dtype(dtype) != host.dtype):
            return np.array(host, dtype=dtype, copy=True)
        return host

    def __buffer__(self, flags: int) -> memoryview:
        return memoryview(self.host)  # type: ignore[arg-type]  # ndarray is a Buffer

    def __release_buffer__(self, view: memoryview) -> None:
        view.release()

    def _dlpack_source(self) -> Any:
        return self.host if self._unified else self.device

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self._dlpack_source().__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        with self._lock:
            host = self._allocated_host()
            if self._unified:
                return host.__dlpack_device__()
            self._push()
            device: tuple[int, int] = self._device.__dlpack_device__()
            return device

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        if self._unified or not self._backend.has(Capability.CUDA_ARRAY_INTERFACE):
            raise AttributeError(
                f"a UnifiedBuffer on the {self._backend.name} backend has no CUDA memory"
            )
        interface: dict[str, Any] = self.device.__cuda_array_interface__
        return interface
