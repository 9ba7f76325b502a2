"""``MemoryPool``: reuse of :class:`UnifiedBuffer` objects, with statistics and a byte limit."""

from __future__ import annotations

import operator
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ._backend._contract import Backend
from ._buffer import ShapeLike, UnifiedBuffer, _check_nbytes, _nbytes, _normalize_shape_dtype
from ._exceptions import PoolError, PoolLimitError
from ._plugins import resolve_backend

__all__ = ["MemoryPool", "PoolStatistics", "get_memory_pool"]

_Key = tuple[str, tuple[int, ...], str, bool]


def _check_limit(limit: object) -> int | None:
    """``limit`` as a non-negative number of bytes, or ``None``; else an error naming it."""
    if limit is None:
        return None
    if isinstance(limit, bool):
        raise TypeError(f"limit must be a number of bytes (an int) or None, not a bool: {limit!r}")
    try:
        nbytes = operator.index(limit)  # type: ignore[arg-type]  # checked right here
    except TypeError:
        raise TypeError(
            f"limit must be a number of bytes (an int) or None, not {type(limit).__name__} "
            f"{limit!r}"
        ) from None
    if nbytes < 0:
        raise ValueError(f"limit must be a non-negative number of bytes or None, not {nbytes}")
    return nbytes


@dataclass(frozen=True)
class PoolStatistics:
    """A snapshot of a :class:`MemoryPool`.

    ``hits``: acquisitions served by a released buffer. ``misses``: acquisitions that
    allocated. ``bytes_in_use``: bytes of buffers handed out and not yet released.
    ``bytes_held``: bytes of every buffer the pool owns, in use or free.
    """

    hits: int
    misses: int
    bytes_in_use: int
    bytes_held: int
    buffers_in_use: int
    buffers_free: int
    limit: int | None

    @property
    def hit_rate(self) -> float:
        """``hits / (hits + misses)``: the share of acquisitions served by a released
        buffer; 0.0 before any acquisition."""
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


class MemoryPool:
    """Hands out :class:`UnifiedBuffer` objects and takes them back for reuse.

    Each ``MemoryPool()`` is a pool of its own; :func:`get_memory_pool` is the process's.
    (PyDotCompute's ``MemoryPool``, on the path ``pdc_core.core.memory_pool``, is
    another class: one view per process of :func:`get_memory_pool`'s pool.)

    A released buffer is handed out again to the next :meth:`acquire` with the same
    backend, shape, dtype and pinning; its contents are whatever the previous user
    left (fill it if you need zeros). With ``limit`` (bytes: a non-negative int, not a
    bool; ``TypeError`` or ``ValueError`` naming ``limit`` otherwise), free buffers are
    evicted, oldest first, to make room, and an acquisition that still does not fit
    (or that alone needs more than the limit) raises :class:`~pdc_core.PoolLimitError`
    naming the limit and the bytes requested. Safe to use from many tasks and threads at
    once: every method holds the pool's lock and none of them awaits.

    Reuse can be switched off: :meth:`disable` drops the free buffers and makes the
    pool a pass-through (each acquisition allocates, each release closes the buffer, so
    its memory goes back at once, all still counted); :meth:`enable` turns reuse back
    on. A pool is enabled when made.
    """

    def __init__(self, limit: int | None = None, backend: Backend | str | None = None) -> None:
        self._limit = _check_limit(limit)
        self._enabled = True
        self._backend = backend
        self._lock = threading.Lock()
        self._free: OrderedDict[int, tuple[_Key, UnifiedBuffer]] = OrderedDict()
        self._free_by_key: dict[_Key, list[UnifiedBuffer]] = {}
        self._in_use: dict[int, UnifiedBuffer] = {}
        # Every buffer this pool made and that is still alive: a release of one that is
        # neither in use nor free is a second release (after a release that dropped it,
        # closed, or an eviction), not a stranger.
        self._made: weakref.WeakSet[UnifiedBuffer] = weakref.WeakSet()
        self._hits = 0
        self._misses = 0
        self._bytes_in_use = 0
        self._bytes_held = 0

    @property
    def limit(self) -> int | None:
        """The byte limit, or ``None``. Setting it (checked as in the constructor) evicts
        free buffers, oldest first, until the bytes held fit; buffers in use stay, and
        later acquisitions wait for no room: they are refused until releases make some.
        While the bytes held exceed the limit, a released buffer is closed, not kept."""
        return self._limit

    @limit.setter
    def limit(self, limit: int | None) -> None:
        checked = _check_limit(limit)
        with self._lock:
            self._limit = checked
            if checked is not None:  # no limit: everything held fits
                self._evict_until(checked)

    @property
    def enabled(self) -> bool:
        """Whether released buffers are kept for reuse (see :meth:`disable`)."""
        return self._enabled

    def enable(self) -> None:
        """Keep released buffers for reuse again (the state a pool is made in)."""
        with self._lock:
            self._enabled = True

    def disable(self) -> None:
        """Stop reusing: drop the free buffers; later releases close their buffer."""
        with self._lock:
            self._enabled = False
            self._evict_until(None)

    def acquire(
        self,
        shape: ShapeLike,
        dtype: npt.DTypeLike = np.float32,
        *,
        pinned: bool = False,
        backend: Backend | str | None = None,
    ) -> UnifiedBuffer:
        """A buffer of ``shape`` and ``dtype``, reused when one was released.

        Raises what :func:`~pdc_core.backend.normalize_shape_dtype` raises, and
        :class:`~pdc_core.PoolLimitError` when the buffer does not fit the limit (its
        byte count is checked against the limit first, so a shape too large for any
        array is refused as over the limit).
        """
        shape, canonical = _normalize_shape_dtype(shape, dtype)
        nbytes = _nbytes(shape, canonical)  # a Python int: never wraps
        if self.limit is not None and nbytes > self.limit:
            raise PoolLimitError(
                f"cannot allocate {nbytes} bytes for shape {shape} of dtype {canonical}: the "
                f"pool's limit is {self.limit} bytes, less than this one buffer needs"
            )
        _check_nbytes(shape, canonical)
        resolved = resolve_backend(backend if backend is not None else self._backend)
        key: _Key = (resolved.qualified_name, shape, canonical.str, bool(pinned))
        with self._lock:
            candidates = self._free_by_key.get(key) if self._enabled else None
            while candidates and candidates[-1].closed:  # closed after its release
                gone = candidates.pop()
                del self._free[id(gone)]
                self._bytes_held -= gone.nbytes
            if candidates:
                buffer = candidates.pop()
                del self._free[id(buffer)]
                self._hits += 1
            else:
                self._make_room(nbytes)
                buffer = UnifiedBuffer(shape, canonical, pinned=pinned, backend=resolved)
                self._made.add(buffer)
                self._misses += 1
                self._bytes_held += buffer.nbytes
            self._in_use[id(buffer)] = buffer
            self._bytes_in_use += buffer.nbytes
            return buffer

    def release(self, buffer: UnifiedBuffer) -> None:
        """Give ``buffer`` back for reuse; it must not be used afterwards.

        Raises :class:`~pdc_core.PoolError` if this pool did not hand it out or it
        was already released (also when the buffer was closed before its first release,
        or dropped from the free buffers since).
        """
        with self._lock:
            if self._in_use.pop(id(buffer), None) is None:
                if id(buffer) in self._free or buffer in self._made:
                    raise PoolError(f"{buffer!r} was released twice")
                raise PoolError(f"{buffer!r} was not handed out by this pool")
            self._bytes_in_use -= buffer.nbytes
            if not self._enabled or (self._limit is not None and self._bytes_held > self._limit):
                # A pass-through pool gives the memory back now; so does one whose limit
                # was lowered below what it holds: it never keeps more than its limit.
                buffer.close()
            if buffer.closed:  # its memory went back already: nothing to keep for reuse
                self._bytes_held -= buffer.nbytes
                return
            key: _Key = (
                buffer.backend.qualified_name,
                buffer.shape,
                buffer.dtype.str,
                buffer.pinned,
            )
            self._free[id(buffer)] = (key, buffer)
            self._free_by_key.setdefault(key, []).append(buffer)

    @contextmanager
    def lease(
        self, shape: ShapeLike, dtype: npt.DTypeLike = np.float32, **kwargs: Any
    ) -> Iterator[UnifiedBuffer]:
        """``with pool.lease(shape, dtype) as buf:`` acquires, and releases on exit."""
        buffer = self.acquire(shape, dtype, **kwargs)
        try:
            yield buffer
        finally:
            self.release(buffer)

    def _evict_until(self, held: int | None) -> None:
        """Drop free buffers, oldest first, until at most ``held`` bytes are held
        (``None``: all of them). Hold the lock."""
        while self._free and (held is None or self._bytes_held > held):
            _, (key, oldest) = self._free.popitem(last=False)
            self._free_by_key[key].remove(oldest)
            self._bytes_held -= oldest.nbytes

    def _make_room(self, nbytes: int) -> None:
        if self.limit is None:
            return
        self._evict_until(self.limit - nbytes)
        if self._bytes_held + nbytes > self.limit:
            raise PoolLimitError(
                f"cannot allocate {nbytes} bytes: the pool's limit is {self.limit} bytes and "
                f"{self._bytes_in_use} bytes are in use"
            )

    def clear(self) -> None:
        """Drop every free buffer (buffers in use are unaffected)."""
        with self._lock:
            self._evict_until(None)

    def statistics(self) -> PoolStatistics:
        """A consistent snapshot of the pool's counters (taken under its lock)."""
        with self._lock:
            return PoolStatistics(
                hits=self._hits,
                misses=self._misses,
                bytes_in_use=self._bytes_in_use,
                bytes_held=self._bytes_held,
                buffers_in_use=len(self._in_use),
                buffers_free=len(self._free),
                limit=self.limit,
            )


_default_pool: MemoryPool | None = None
_default_lock = threading.Lock()


def get_memory_pool() -> MemoryPool:
    """The process-wide pool (unbounded, on the default backend at each acquisition)."""
    global _default_pool
    with _default_lock:
        if _default_pool is None:
            _default_pool = MemoryPool()
        return _default_pool
