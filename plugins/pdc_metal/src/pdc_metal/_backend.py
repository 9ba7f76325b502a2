"""The metal backend: MLX arrays in unified memory, on the Metal GPU or MLX's CPU device.

Memory model (measured with MLX 0.32, see the tests):

* **MLX -> NumPy is zero-copy.** ``np.asarray(a)`` of an evaluated MLX array is a
  writeable view of the array's own buffer. So every host allocation of this backend
  is made *by MLX* and handed out as such a NumPy view.
* **NumPy -> MLX always copies.** ``mx.array(np_array)`` copies, and
  ``mx.from_dlpack(np_array, copy=False)`` refuses ("Cannot import a CPU array
  without a copy"). MLX cannot wrap memory it did not allocate, so
  :meth:`MetalBackend.device_view` only works on memory this backend allocated, and
  :meth:`MetalBackend.can_view` says which memory that is.
* **MLX arrays are values.** ``a[i] = v`` on an MLX array rebinds that Python object to
  new data (or, when MLX can donate the buffer, writes in place). Handing out the
  array that owns a buffer would therefore let user code free memory a NumPy view
  still points to. The owner stays private (NumPy's view keeps it alive) and
  :meth:`device_view` returns a *new* evaluated MLX view of the same buffer each time.

Lazy evaluation: arrays this backend hands out are evaluated, so they can be read from
any thread and their memory is real. Results of user work are evaluated where they
leave MLX: :meth:`MetalBackend.run` and :meth:`MetalBackend.submit` evaluate what the
function returns, and :meth:`MetalBackend.to_host` evaluates what it copies. A graph
built from a device view reads the buffer when it is *evaluated*, not when it is
built: evaluate it before writing the host memory that feeds it.

The class is the facade: its memory services live in :mod:`pdc_metal._memory`
(:class:`~pdc_metal._memory.MetalMemory`), its kernel services (running MLX code,
Python kernels, Metal shaders) in :mod:`pdc_metal._work`
(:class:`~pdc_metal._work.MetalWork`), its streams in :mod:`pdc_metal._streams`, and
its persistent kernels in :mod:`pdc_metal._persistent`; none of them knows the class
(each takes what it needs of it through a protocol).
"""

from __future__ import annotations

import abc
import os
import threading
import weakref
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from types import ModuleType
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from pdc_core import (
    Backend,
    Capability,
    DeviceInfo,
)
from pdc_core.backend import (
    Availability,
    MemoryKind,
    MemoryStatistics,
    PersistentKernelSpec,
    ResidentKernel,
    RingMemory,
    Stream,
)

from . import _mlx
from ._kernels import MetalKernel
from ._memory import MetalMemory
from ._streams import MetalEvent, MetalStream, check_stream
from ._work import MetalWork

__all__ = ["MetalBackend"]

_BASE_CAPABILITIES = frozenset(
    {
        Capability.UNIFIED_MEMORY,
        Capability.ASYNC_COPIES,
        Capability.PYTHON_KERNELS,
        Capability.PERSISTENT_KERNELS,
        Capability.PIPELINES,
    }
)


def _host_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _capabilities() -> frozenset[Capability]:
    if _mlx.metal_possible() and _mlx.probe().metal:
        return _BASE_CAPABILITIES | {Capability.KERNELS}
    return _BASE_CAPABILITIES


class _MetalBackendType(abc.ABCMeta):
    """Makes ``priority`` and ``capabilities`` depend on what MLX found, at class level.

    pdc reads both from the class, before any instance exists. They cannot be fixed
    constants: with a Metal GPU the backend outranks cpu and compiles Metal shaders;
    on MLX's CPU device it ranks below cpu and compiles nothing.
    """

    @property
    def priority(cls) -> int:
        return _mlx.priority()

    @property
    def capabilities(cls) -> frozenset[Capability]:
        return _capabilities()


class MetalBackend(Backend, metaclass=_MetalBackendType):
    """MLX on the Metal GPU of Apple silicon, or on MLX's CPU device elsewhere.

    Availability and ranking: without MLX (or with a Linux ``mlx`` lacking its
    ``cpu`` extra) the backend is unavailable and says why. With a Metal GPU it is
    available with priority 50 (above cpu, below cuda) and declares ``kernels``. With
    MLX's CPU device only (Linux, ``mlx[cpu]``) it is available, reports its device as
    kind ``"cpu"``, and has priority -10, *below* the cpu backend: pdc picks it only
    when asked (``get_backend("metal")``, ``PDC_BACKEND=metal``) or when no cpu backend
    is installed, because MLX on a CPU is no accelerator.

    Memory is unified: every :class:`~pdc_core.backend.MemoryKind` is MLX-allocated memory.
    ``HOST``/``PINNED``/``MAPPED`` allocations are NumPy views of it, ``DEVICE`` and
    ``MANAGED`` allocations MLX arrays; :meth:`device_view` turns such a NumPy view
    into an MLX array of the very same bytes. Copies (:meth:`to_device`,
    :meth:`to_host`) are real copies.
    """

    name: ClassVar[str] = "metal"
    distribution: ClassVar[str] = "pdc-metal"

    # Instances see the same dynamic values as the class (the metaclass properties
    # are only consulted for attribute access on the class itself).
    @property
    def priority(self) -> int:  # type: ignore[override]
        """Where the backend ranks when pdc picks the best one: above cpu with a Metal
        GPU, below it on MLX's CPU device."""
        return _mlx.priority()

    @property
    def capabilities(self) -> frozenset[Capability]:  # type: ignore[override]
        """What the backend can do; Metal shader kernels only with a Metal GPU."""
        return _capabilities()

    def __init__(self, device: int = 0) -> None:
        super().__init__(device)
        mx = _mlx.load()
        self._mx = mx
        self.is_metal = _mlx.probe().metal
        #: The MLX device work runs on (``mx.gpu`` with Metal, else ``mx.cpu``).
        self.mlx_device: Any = mx.gpu if self.is_metal else mx.cpu
        self._default_stream: MetalStream | None = None
        self._streams: weakref.WeakSet[MetalStream] = weakref.WeakSet()
        self._streams_lock = threading.Lock()
        # The memory and kernel services the methods below delegate to.
        self._memory = MetalMemory(self)
        self._work = MetalWork(self, self._memory)

    @property
    def mx(self) -> ModuleType:
        """``mlx.core``, as this backend loaded it (its parts use MLX through this)."""
        return self._mx

    # -- discovery ------------------------------------------------------------------

    @classmethod
    def availability(cls) -> Availability:
        return _mlx.availability()  # the function the plugin registers it with

    @classmethod
    def devices(cls) -> list[DeviceInfo]:
        mx = _mlx.load()
        metal = _mlx.probe().metal
        device = mx.gpu if metal else mx.cpu
        try:
            info = dict(mx.device_info(device))
        except Exception:
            info = {}
        hardware = str(info.get("device_name") or info.get("architecture") or "unknown")
        if metal:
            name = f"{hardware} (Metal GPU, through MLX)"
            total = info.get("memory_size")
        else:
            name = f"MLX CPU device ({hardware}; no Metal GPU here)"
            total = None
        properties: dict[str, Any] = {
            "mlx": _mlx.probe().version,
            "mlx_device": "gpu" if metal else "cpu",
            "metal": metal,
            "memory": "unified: MLX allocates, NumPy host views share it without copies",
        }
        properties.update({key: value for key, value in info.items() if key != "device_name"})
        return [
            DeviceInfo(
                backend=cls.name,
                index=0,
                name=name,
                kind="gpu" if metal else "cpu",
                total_memory=int(total) if total else _host_memory(),
                properties=properties,
            )
        ]

    # -- memory ---------------------------------------------------------------------

    def allocate(
        self, shape: tuple[int, ...], dtype: np.dtype[Any], kind: MemoryKind = MemoryKind.DEVICE
    ) -> Any:
        """Zero-filled MLX memory; a NumPy view of it for host kinds, the MLX array else.

        ``HOST``, ``PINNED`` and ``MAPPED`` return a NumPy array viewing the MLX buffer
        (so :meth:`device_view` can share it); ``DEVICE`` and ``MANAGED`` return the
        evaluated MLX array. A dtype MLX cannot hold exactly raises ``TypeError``.
        """
        return self._memory.allocate(shape, dtype, kind)

    def can_view(self, host: npt.NDArray[Any]) -> bool:
        """True when ``host`` is exactly a whole buffer MLX allocated (see :meth:`allocate`)."""
        return self._memory.can_view(host)

    def device_view(self, host: npt.NDArray[Any]) -> Any:
        """A new, evaluated MLX array over the same bytes as ``host``; never a copy.

        ``host`` must be a NumPy view of a whole MLX allocation of this backend;
        anything else raises :class:`~pdc_core.BackendError` saying why (use
        :meth:`to_device` for a copy). Each call returns a fresh MLX array object, so
        rebinding one (``view[i] = v``) never detaches the buffer from ``host``.
        """
        return self._memory.device_view(host)

    def to_device(
        self, host: npt.NDArray[Any], out: Any = None, stream: Stream | None = None
    ) -> Any:
        """Copy ``host`` into MLX memory (a new MLX array, or ``out``'s buffer).

        With ``stream`` the copy runs on that stream (``out`` is allocated first when
        not given) and may still be running on return. The dtype must be one MLX holds
        exactly (``TypeError`` otherwise: MLX itself would silently narrow some).
        """
        return self._memory.to_device(host, out, check_stream(stream))

    def to_host(
        self, device: Any, out: npt.NDArray[Any] | None = None, stream: Stream | None = None
    ) -> npt.NDArray[Any]:
        """Evaluate ``device`` (an MLX array) and copy it to host memory.

        This is where a host read after device work sees the result: the MLX graph is
        evaluated (on the caller's thread, asynchronously when a ``stream`` is given)
        before the bytes are copied.
        """
        return self._memory.to_host(device, out, check_stream(stream))

    def memory_statistics(self) -> MemoryStatistics:
        """MLX's allocator, process-wide for this device.

        ``bytes_in_use`` is ``mx.get_active_memory()``, ``bytes_held`` adds
        ``mx.get_cache_memory()``, ``limit`` is ``mx.get_memory_limit()``. MLX does not
        count cache hits, so ``hits`` and ``misses`` are 0; :meth:`memory_report`
        adds the peak.
        """
        return self._memory.statistics()

    def memory_report(self) -> dict[str, int]:
        """MLX's own counters: active, cache and peak bytes, and the memory limit."""
        return self._memory.report()

    def reset_peak_memory(self) -> None:
        """Reset MLX's peak-memory counter (``mx.reset_peak_memory()``)."""
        self._memory.reset_peak()

    def free_cached_memory(self) -> None:
        """Give MLX's cached buffers back to the system (``mx.clear_cache()``)."""
        self._memory.free_cached()

    # -- streams and events -----------------------------------------------------------

    def create_stream(self) -> MetalStream:
        stream = MetalStream(self)
        with self._streams_lock:
            self._streams.add(stream)
        return stream

    def create_event(self) -> MetalEvent:
        return MetalEvent()

    @property
    def default_stream(self) -> MetalStream:
        """The stream :meth:`submit` and :meth:`run_async` use when given none."""
        with self._streams_lock:
            stream = self._default_stream
        if stream is None or stream.closed:
            fresh = self.create_stream()
            with self._streams_lock:
                if self._default_stream is None or self._default_stream.closed:
                    self._default_stream = fresh
                stream = self._default_stream
            if stream is not fresh:
                fresh.close()
        return stream

    def synchronize(self) -> None:
        """Wait for every stream of this backend and MLX's default stream of this thread."""
        with self._streams_lock:
            streams = list(self._streams)
        for stream in streams:
            if not stream.closed:
                stream.synchronize()
        self._mx.synchronize(self.mlx_device)

    # -- running MLX code ---------------------------------------------------------------

    def as_mlx(self, value: Any) -> Any:
        """``value`` as an MLX array for a kernel body: zero-copy where MLX allows.

        A metal :class:`~pdc_core.UnifiedBuffer`, or a NumPy view of an MLX allocation,
        becomes a device view of the same memory; a buffer of another backend or
        other NumPy memory is copied (MLX cannot wrap it); MLX arrays are evaluated;
        anything else is returned unchanged.
        """
        return self._work.as_mlx(value)

    def run(
        self,
        fn: Callable[..., Any],
        *args: Any,
        out: Any = None,
        **kwargs: Any,
    ) -> Any:
        """Run ``fn`` (a function of MLX operations) on this backend's device, now.

        Buffer and array arguments are converted with :meth:`as_mlx`; ``fn`` runs on
        the calling thread with the MLX device as default; its result (an array or a
        tuple/list of them) is evaluated and returned. With ``out`` (a UnifiedBuffer,
        NumPy or MLX array, or a sequence matching the results) the results are also
        written into that memory, so the next ``buf.host`` read sees them: MLX cannot
        compute into a given buffer, so this is one copy within unified memory.
        """
        return self._work.run(fn, *args, out=out, **kwargs)

    def submit(
        self,
        fn: Callable[..., Any],
        *args: Any,
        out: Any = None,
        stream: MetalStream | None = None,
        **kwargs: Any,
    ) -> Future[Any]:
        """Queue ``fn`` on ``stream`` (default: :attr:`default_stream`); returns a future.

        Arguments are converted (and evaluated) now, on the calling thread; ``fn`` and
        the write into ``out`` run on the stream's worker, in order with other work on
        that stream. The future holds the evaluated result.
        """
        return self._work.submit(fn, *args, out=out, stream=stream, **kwargs)

    async def run_async(
        self,
        fn: Callable[..., Any],
        *args: Any,
        out: Any = None,
        stream: MetalStream | None = None,
        **kwargs: Any,
    ) -> Any:
        """:meth:`submit`, then wait for the result without blocking the event loop.

        Cancelling the wait does not un-queue the work (device work cannot be
        recalled); it completes on its stream and its result is dropped.
        """
        return await self._work.run_async(fn, *args, out=out, stream=stream, **kwargs)

    # -- kernels written with MLX operations ----------------------------------------------

    def run_python_kernel(
        self,
        body: Callable[..., Any],
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        args: tuple[Any, ...],
        *,
        shared_mem: int = 0,
        stream: Stream | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        """Run a ``@kernel`` body written with MLX operations, once, over whole arrays.

        MLX has no threads to index: the body is called once with every array argument
        as an MLX array (zero-copy for metal memory, a copy of other NumPy memory) and
        writes its results with item assignment (``out[...] = a * 2 + 1``); ``grid``,
        ``block`` and ``shared_mem`` do not apply. After the body, every argument it
        reassigned is evaluated and written back into the argument's own memory (the
        NumPy array, the :class:`~pdc_core.UnifiedBuffer`, or the MLX array's buffer),
        so a host read sees it. numba.cuda-style bodies (``cuda.grid(1)``) do not run
        here. Without ``stream`` this returns when done; with one the body runs on it.
        """
        self._work.run_python_kernel(
            body, grid, block, args, shared_mem=shared_mem, stream=stream, options=options
        )

    # -- persistent kernels ---------------------------------------------------------------

    def launch_persistent_kernel(
        self, kernel: PersistentKernelSpec, rings: RingMemory, **options: Any
    ) -> ResidentKernel:
        """Emulate ``kernel`` resident on ``rings``: a worker thread runs the ring
        protocol and the kernel's ``metal`` body on a dedicated MLX stream.

        Options: ``worker_wait``, ``host_wait``, ``idle_timeout``, as for
        :class:`~pdc_core.backend.HostWorkerKernel`.

        The ``metal`` body's calling convention (MLX has no structured dtypes):

        * ``body(requests) -> replies``, or ``body(requests, state) -> replies`` (or
          ``-> (replies, new_state)``) when the kernel has device-resident state.
        * ``requests``: a ``dict`` mapping each field name of the request dtype to an MLX
          array with one row per request (shape ``(n,)``, or ``(n, *subshape)`` for a
          sub-array field), of the field's exact dtype (``f8`` stays ``float64``: MLX's CPU
          device computes in it, the Metal GPU does not). A request dtype without fields
          (``float32``, say) gives one MLX array of shape ``(n,)`` instead of a dict.
        * ``replies``: a mapping with exactly the reply dtype's field names, each value an MLX
          (or NumPy) array of shape ``(n,)`` / ``(n, *subshape)`` whose dtype casts to the
          field's within its kind (``float32`` -> ``f8`` is fine, ``float`` -> ``int`` is not).
          A reply dtype without fields takes one array of shape ``(n,)``. Anything else --
          missing or unknown fields, a wrong shape or dtype kind -- is reported through the
          error word as ``ErrorCode.BAD_REPLY`` naming the field, so the session raises
          :class:`~pdc_core.ActorCrashed`.
        * ``state``: an evaluated MLX array, a copy of ``PersistentKernel(state=...)``. Update
          it with item assignment (``state[0] += n``, which MLX applies to the same array
          object) or return ``(replies, new_state)`` with an array of the same shape and dtype
          to replace it. It is evaluated after every batch, so
          :meth:`~pdc_core.PersistentKernelSession.read_state` (while paused or after the
          stop) sees it.

        Every field and the state must have a dtype MLX holds exactly (the launch raises a
        ``TypeError`` naming the field otherwise: nested structured fields, ``complex128``,
        strings ...).
        """
        from ._persistent import launch

        return launch(self, kernel, rings, **options)

    # -- Metal shaders -------------------------------------------------------------------

    def compile_kernel(self, source: str, name: str, options: tuple[str, ...] = ()) -> MetalKernel:
        """Compile a Metal shader body with ``mx.fast.metal_kernel``.

        ``source`` is the body MLX wraps in a generated signature; ``options`` are
        ``"input_names=a,b"``, ``"output_names=out"`` (both required),
        ``"header=<Metal source>"``, ``"ensure_row_contiguous=false"`` and
        ``"atomic_outputs=true"``. Without a Metal GPU this raises
        :class:`~pdc_core.CapabilityError`: MLX's CPU device cannot run Metal; write
        the kernel as MLX operations and use :meth:`run` instead.
        """
        return self._work.compile_kernel(source, name, options)
