"""Per-message kernel launches from fixed staging buffers, replayed from CUDA graphs.

A message-driven actor whose work is *not* resident pays, per message, a host-to-device
copy, a kernel launch and a device-to-host copy, each a separate call into CUDA.
:class:`MessageLauncher` captures that sequence once per launch signature into a CUDA
graph and replays it per message: one ``cudaGraphLaunch`` instead of three calls::

    launcher = MessageLauncher(backend.compile_kernel(SCALE_INTO, "scale_into"))
    (y,) = launcher(In(x), Out(x.shape, np.float32), np.float32(2), np.uint64(x.size))
    (y,) = await launcher.launch_async(In(x), Out(x.shape, np.float32), ...)
    launcher.close()

Per message: the :class:`In` arrays are copied (on the host) into the graph's pinned
input buffers, the graph is replayed on the launcher's non-blocking stream (copy in,
kernel, copy out), the launcher waits for that stream -- never the device -- and the
:class:`Out` buffers are returned as fresh NumPy arrays. ``graph=False`` runs the same
calls directly each message (the plain launch, for comparison and for work that cannot
be captured).

**What the graph is keyed by.** A graph bakes in every address and every kernel
parameter. The cache key is therefore, per argument: the shape and dtype of each
:class:`In`/:class:`InOut`/:class:`Out` (their buffers are the graph's own), the address,
shape, dtype and strides of a device array passed as it is, and the type and bytes of a
scalar; plus ``size=``. The kernel, the launch geometry given to the launcher, the
dynamic shared memory and the device are fixed per launcher. A message whose key is new
is captured (a *capture*, counted); up to ``max_graphs`` signatures are kept, the least
recently used one is destroyed (its graph and buffers freed) to make room. A scalar that
changes every message therefore captures every message: pass such a value in a
one-element :class:`In` array instead.

**Capture.** Buffers are allocated *before* capture, so nothing in the captured region
allocates. Capture runs on the launcher's non-blocking stream (the legacy default stream
cannot be captured, and a blocking stream would join the legacy stream's implicit
synchronisation) in ``cudaStreamCaptureModeThreadLocal``: a potentially unsafe CUDA call
(a ``cudaMalloc`` by a memory pool, a synchronous copy) made *by this thread* during the
capture fails the capture loudly instead of running outside the graph, as the relaxed
mode would let it; calls made by *other* threads are not affected, whereas the global
mode would make every other thread's ``cudaMalloc`` fail while the capture lasts. The
capture always ends, also when the enqueued work raises: a stream left capturing fails
every later call on it. A graph that fails to capture or instantiate is destroyed and
raised as :class:`~pdc_core.BackendError`; nothing of it is cached.

**Lifetime.** :meth:`MessageLauncher.close` (or leaving ``with``/``async with``) destroys
every graph and frees every buffer; closing while a message is in flight frees them when
that message ends. A cancelled :meth:`~MessageLauncher.launch_async` still waits,
shielded, for the replay it queued (it cannot be interrupted and it writes the staging
buffers) before the cancellation goes on. A launcher dropped without ``close`` destroys
its graphs when it is garbage-collected.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import weakref
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol

import anyio
import numpy as np
import numpy.typing as npt

from pdc_core import BackendError, Kernel, UnifiedBuffer, get_backend
from pdc_core.backend import MemoryKind, PollingWaiter, normalize_shape_dtype

from ._kernels import CudaKernel
from ._launch import explicit_config
from ._memory import pinned_empty

if TYPE_CHECKING:
    from ._backend import CudaBackend

__all__ = [
    "CupyGraphOps",
    "GraphOps",
    "In",
    "InOut",
    "LauncherStatistics",
    "MessageLauncher",
    "Out",
]

#: How many launch signatures a launcher keeps by default.
DEFAULT_MAX_GRAPHS: Final = 8


# -- arguments -------------------------------------------------------------------------------


def _host_array(value: Any, role: str) -> npt.NDArray[Any]:
    if isinstance(value, UnifiedBuffer) or hasattr(value, "__cuda_array_interface__"):
        raise TypeError(
            f"{role}(...) takes a host (NumPy) array, not {type(value).__name__}: a device "
            "array goes to the kernel as it is, without a wrapper"
        )
    array = np.asarray(value)
    if array.dtype.hasobject:
        raise TypeError(
            f"{role}(...) cannot stage an array of dtype {array.dtype} (Python objects)"
        )
    return array


class In:
    """A host array copied into the graph's device input buffer before the kernel runs.

    The kernel receives the device buffer (same shape and dtype). The array is read
    when the message is launched; the launcher keeps no reference to it.
    """

    __slots__ = ("array",)

    def __init__(self, array: npt.ArrayLike) -> None:
        self.array = _host_array(array, type(self).__name__)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(shape={self.array.shape}, dtype={self.array.dtype})"


class InOut(In):
    """Like :class:`In`, and the buffer is copied back after the kernel: its content is
    returned among the results (the array given is not modified)."""

    __slots__ = ()


class Out:
    """A device buffer of ``shape`` and ``dtype`` the kernel writes; it is copied back
    after the kernel and returned among the results. Its content before the kernel
    runs is unspecified (what the previous message left there)."""

    __slots__ = ("dtype", "shape")

    def __init__(self, shape: Any, dtype: npt.DTypeLike) -> None:
        self.shape, self.dtype = normalize_shape_dtype(shape, dtype)

    def __repr__(self) -> str:
        return f"Out(shape={self.shape}, dtype={self.dtype})"


_PYTHON_SCALARS: Final[dict[type, type[np.generic]]] = {
    # What CuPy passes a Python scalar as (64-bit), made explicit so that the key and
    # the parameter the kernel receives are the same value.
    bool: np.bool_,
    int: np.int64,
    float: np.float64,
    complex: np.complex128,
}


def _baked(position: int, value: Any) -> tuple[Hashable, Any]:
    """The key and the kernel parameter of an argument the graph bakes in."""
    if isinstance(value, UnifiedBuffer):
        value = value.device
    elif isinstance(value, np.ndarray):
        if value.ndim != 0:
            raise TypeError(
                f"argument {position} is a NumPy array of shape {value.shape}: a kernel cannot "
                "read host memory. Wrap it in In(...) (copied in), InOut(...) or give "
                "Out(shape, dtype) for a result"
            )
        value = value[()]
    scalar = _PYTHON_SCALARS.get(type(value))
    if scalar is not None:
        value = scalar(value)
    if isinstance(value, np.generic):
        return (value.dtype, value.tobytes()), value
    interface = getattr(value, "__cuda_array_interface__", None)
    if interface is not None:
        key = (
            "device",
            int(interface["data"][0]),
            tuple(interface["shape"]),
            interface["typestr"],
            interface.get("strides"),
        )
        return key, value
    raise TypeError(
        f"argument {position} is a {type(value).__name__}; a message launch takes In(...), "
        "InOut(...), Out(shape, dtype), device arrays (CuPy, UnifiedBuffer) and scalars"
    )


# -- the CUDA calls ----------------------------------------------------------------------------


class GraphOps(Protocol):
    """The CUDA calls a :class:`MessageLauncher` makes (:class:`CupyGraphOps` on a GPU).

    Addresses are plain integers; ``stream`` is what :meth:`create_stream` returned.
    Copies and launches are queued on the stream, or recorded into the graph while the
    stream captures.
    """

    def device_context(self) -> contextlib.AbstractContextManager[Any]:
        """A context in which the backend's device is the current one."""
        ...

    def create_stream(self) -> Any:
        """A new stream for the launcher's copies, launches and replays."""
        ...

    def close_stream(self, stream: Any) -> None:
        """Release a stream made by :meth:`create_stream`."""
        ...

    def host_buffer(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> npt.NDArray[Any]:
        """A staging host array (pinned, so copies can be queued and captured)."""
        ...

    def device_buffer(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Any:
        """A device array of ``shape`` and ``dtype``."""
        ...

    def device_address(self, array: Any) -> int:
        """The device address of an array made by :meth:`device_buffer`."""
        ...

    def copy_to_device(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        """Queue (or, while capturing, record) a copy of ``nbytes`` host to device."""
        ...

    def copy_to_host(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        """Queue (or, while capturing, record) a copy of ``nbytes`` device to host."""
        ...

    def launch(
        self,
        kernel: CudaKernel,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        args: tuple[Any, ...],
        shared_mem: int,
        stream: Any,
    ) -> None:
        """Queue (or, while capturing, record) a launch of ``kernel`` on ``stream``."""
        ...

    def begin_capture(self, stream: Any) -> None:
        """Start capturing ``stream``'s work into a graph instead of running it."""
        ...

    def end_capture(self, stream: Any) -> int:
        """End the capture; return the captured graph."""
        ...

    def instantiate(self, graph: int, stream: Any) -> int:
        """Make an executable graph of ``graph``, ready to replay on ``stream``."""
        ...

    def replay(self, executable: int, stream: Any) -> None:
        """Queue one run of an executable graph on ``stream``."""
        ...

    def destroy_graph(self, graph: int) -> None:
        """Release a graph returned by :meth:`end_capture`."""
        ...

    def destroy_executable(self, executable: int) -> None:
        """Release an executable graph returned by :meth:`instantiate`."""
        ...

    def synchronize(self, stream: Any) -> None:
        """Block until the work queued on ``stream`` is done."""
        ...

    def done(self, stream: Any) -> bool:
        """Whether the work queued on ``stream`` is done (never waits)."""
        ...


class CupyGraphOps:
    """:class:`GraphOps` through CuPy's runtime bindings, on one :class:`CudaBackend`.

    Copies are raw ``cudaMemcpyAsync`` calls between pinned host memory and device
    memory (CuPy's ``ndarray.set``/``get`` refuse a capturing stream); staging host
    buffers come from CuPy's pinned pool, device buffers from the backend's pool, so
    freeing them returns them to the pools (no ``cudaFree``/``cudaFreeHost``, which may
    wait for the whole device while a persistent kernel is resident).
    """

    def __init__(self, backend: CudaBackend) -> None:
        import cupy

        self.backend = backend
        self._runtime = cupy.cuda.runtime

    def device_context(self) -> contextlib.AbstractContextManager[Any]:
        """The backend's ``device_context()``."""
        return self.backend.device_context()

    def create_stream(self) -> Any:
        """A new :class:`~pdc_cuda.CudaStream` of the backend."""
        return self.backend.create_stream()

    def close_stream(self, stream: Any) -> None:
        """Close the stream."""
        stream.close()

    def host_buffer(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> npt.NDArray[Any]:
        """A NumPy array in pinned memory from CuPy's pinned pool."""
        return pinned_empty(shape, dtype)

    def device_buffer(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Any:
        """A CuPy array from the backend's memory pool."""
        return self.backend.allocate(shape, dtype, MemoryKind.DEVICE)

    def device_address(self, array: Any) -> int:
        """The CuPy array's ``data.ptr``."""
        return int(array.data.ptr)

    def copy_to_device(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        """``cudaMemcpyAsync`` host to device on the stream."""
        runtime = self._runtime
        runtime.memcpyAsync(dst, src, nbytes, runtime.memcpyHostToDevice, stream.ptr)

    def copy_to_host(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        """``cudaMemcpyAsync`` device to host on the stream."""
        runtime = self._runtime
        runtime.memcpyAsync(dst, src, nbytes, runtime.memcpyDeviceToHost, stream.ptr)

    def launch(
        self,
        kernel: CudaKernel,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        args: tuple[Any, ...],
        shared_mem: int,
        stream: Any,
    ) -> None:
        """Launch the compiled kernel's CuPy ``RawKernel`` on the stream."""
        with stream.cupy:
            kernel.raw(grid, block, args, shared_mem=shared_mem)

    def begin_capture(self, stream: Any) -> None:
        """``cudaStreamBeginCapture`` in thread-local mode."""
        self._runtime.streamBeginCapture(stream.ptr, self._runtime.streamCaptureModeThreadLocal)

    def end_capture(self, stream: Any) -> int:
        """``cudaStreamEndCapture``: the captured graph."""
        return int(self._runtime.streamEndCapture(stream.ptr))

    def instantiate(self, graph: int, stream: Any) -> int:
        """``cudaGraphInstantiate``, then ``cudaGraphUpload`` on the stream so the
        first replay does not pay for the upload; a failed upload destroys the
        executable before the error propagates."""
        runtime = self._runtime
        executable = int(runtime.graphInstantiate(graph))
        try:
            # Upload now, so the first replay does not pay for it.
            runtime.graphUpload(executable, stream.ptr)
        except BaseException:
            runtime.graphExecDestroy(executable)
            raise
        return executable

    def replay(self, executable: int, stream: Any) -> None:
        """``cudaGraphLaunch`` on the stream."""
        self._runtime.graphLaunch(executable, stream.ptr)

    def destroy_graph(self, graph: int) -> None:
        """``cudaGraphDestroy``."""
        self._runtime.graphDestroy(graph)

    def destroy_executable(self, executable: int) -> None:
        """``cudaGraphExecDestroy``."""
        self._runtime.graphExecDestroy(executable)

    def synchronize(self, stream: Any) -> None:
        """The stream's ``synchronize()``."""
        stream.synchronize()

    def done(self, stream: Any) -> bool:
        """The stream's ``done``."""
        return bool(stream.done)


# -- the launcher ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class LauncherStatistics:
    """What a :class:`MessageLauncher` did so far."""

    #: Messages launched (captured, replayed or launched plainly).
    messages: int
    #: Signatures captured into a graph (each a miss of the cache in graph mode).
    captures: int
    #: Messages run by replaying a cached graph.
    replays: int
    #: Messages run by plain calls (``graph=False``).
    plain_launches: int
    #: Signatures dropped to stay within ``max_graphs`` (their graphs and buffers freed).
    evictions: int
    #: Signatures held now.
    cached: int


@dataclass
class _Staged:
    """The buffers, kernel parameters and (in graph mode) executable graph of one signature."""

    args: tuple[Any, ...]
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    #: Pinned host buffers the In/InOut arrays are copied into, in argument order.
    inputs: list[npt.NDArray[Any]]
    #: Pinned host buffers holding the Out/InOut results after the work, in order.
    outputs: list[npt.NDArray[Any]]
    #: (device address, host address, bytes) copied before / after the kernel.
    uploads: list[tuple[int, int, int]]
    downloads: list[tuple[int, int, int]]
    #: Device buffers and baked device arrays: the graph's addresses stay valid.
    keep: list[Any] = field(default_factory=list)
    executable: int = 0


def _destroy_all(ops: GraphOps, entries: collections.OrderedDict[Any, _Staged]) -> None:
    """Destroy every graph of ``entries`` and drop their buffers (never raises)."""
    while entries:
        _, entry = entries.popitem(last=False)
        if entry.executable:
            with contextlib.suppress(Exception):  # a failed context: nothing left to free
                ops.destroy_executable(entry.executable)
            entry.executable = 0


class MessageLauncher:
    """Launch one kernel per message from fixed staging buffers, by CUDA graph replay.

    ``kernel`` is a :class:`~pdc_cuda.CudaKernel` or a ``pdc_core`` source kernel
    (``kernel.source(...)``, compiled for ``backend``: a :class:`~pdc_cuda.CudaBackend`
    or a name, default the kernel's or ``"cuda"``). Python kernel bodies are refused:
    numba-cuda launches them, outside this path.

    Call it with the kernel's arguments, host arrays wrapped as :class:`In`,
    :class:`InOut` or :class:`Out`, device arrays and scalars as they are; it returns
    a tuple of NumPy arrays, one per :class:`Out`/:class:`InOut` in argument order.
    ``launcher(*args)`` waits for its own stream (never the device);
    ``await launcher.launch_async(*args)`` polls it in the event loop. One message runs
    at a time: concurrent ``launch_async`` calls take turns; a synchronous call while a
    message is in flight raises ``RuntimeError``. One event loop drives a launcher.

    Launch geometry: ``grid`` and ``block`` when given; otherwise the kernel's
    automatic configuration (:meth:`CudaKernel.config`) over ``size=`` of the call, or
    the shape of the first staged argument. ``graph=False`` makes the same calls
    directly each message instead of replaying a graph. See the module documentation
    for the cache key, the capture mode and the lifetime guarantees.
    """

    def __init__(
        self,
        kernel: CudaKernel | Kernel,
        *,
        backend: CudaBackend | str | None = None,
        grid: Any = None,
        block: Any = None,
        shared_mem: int = 0,
        graph: bool = True,
        max_graphs: int = DEFAULT_MAX_GRAPHS,
        ops: GraphOps | None = None,
    ) -> None:
        self.kernel = _cuda_kernel(kernel, backend)
        if isinstance(max_graphs, bool) or not isinstance(max_graphs, int) or max_graphs < 1:
            raise ValueError(f"max_graphs must be a positive int, not {max_graphs!r}")
        if isinstance(shared_mem, bool) or not isinstance(shared_mem, int) or shared_mem < 0:
            raise ValueError(f"shared_mem must be a number of bytes >= 0, not {shared_mem!r}")
        if grid is not None and block is None:
            raise ValueError("give block= with grid= (or neither, for the automatic configuration)")
        self.graph = bool(graph)
        self.max_graphs = max_graphs
        self.shared_mem = shared_mem
        self._grid = grid
        self._block = block
        self._ops: GraphOps = (
            ops if ops is not None else CupyGraphOps(_resolve(self.kernel.backend))
        )
        with self._ops.device_context():
            self._stream = self._ops.create_stream()
        self._entries: collections.OrderedDict[Any, _Staged] = collections.OrderedDict()
        self._state = threading.Lock()
        self._turns = anyio.Lock()
        self._busy = False
        self._closed = False
        self._freed = False
        self._messages = self._captures = self._replays = self._plain = self._evictions = 0
        self._finalizer = weakref.finalize(self, _destroy_all, self._ops, self._entries)

    # -- launching -------------------------------------------------------------------------

    def __call__(self, *args: Any, size: Any = None) -> tuple[npt.NDArray[Any], ...]:
        """Launch one message and wait for it (its stream only); return the results."""
        self._begin_message()
        try:
            with self._ops.device_context():
                entry = self._queue(args, size)
                self._ops.synchronize(self._stream)
            return tuple(output.copy() for output in entry.outputs)
        finally:
            self._end_message()

    async def launch_async(self, *args: Any, size: Any = None) -> tuple[npt.NDArray[Any], ...]:
        """Launch one message and wait for it without blocking the event loop.

        Polls the stream with ``sleep(0)`` for the first millisecond, then backs off
        (:class:`~pdc_core.backend.PollingWaiter`). If the task is cancelled after the
        work was queued, the work is still awaited, shielded, before the cancellation
        goes on: nothing queued outlives the call, and the buffers stay consistent.
        """
        async with self._turns:
            self._begin_message()
            try:
                with self._ops.device_context():
                    entry = self._queue(args, size)
                await self._wait()
                return tuple(output.copy() for output in entry.outputs)
            finally:
                self._end_message()

    def _queue(self, args: tuple[Any, ...], size: Any) -> _Staged:
        """Find (or capture) the signature of ``args``, stage the inputs and queue the work."""
        parts: list[Hashable] = []
        arrays: list[npt.NDArray[Any]] = []
        for position, arg in enumerate(args):
            if isinstance(arg, In):
                parts.append((type(arg), arg.array.shape, arg.array.dtype))
                arrays.append(arg.array)
            elif isinstance(arg, Out):
                parts.append((Out, arg.shape, arg.dtype))
            else:
                parts.append(_baked(position, arg)[0])
        key = (tuple(parts), _size_key(size))
        entry = self._entries.get(key)
        if entry is None:
            self._make_room()
            entry = self._stage(args, size)
            if self.graph:
                entry.executable = self._capture(entry)
                self._captures += 1
            self._entries[key] = entry
        else:
            self._entries.move_to_end(key)
        for staging, array in zip(entry.inputs, arrays, strict=True):
            np.copyto(staging, array, casting="no")
        if self.graph:
            self._ops.replay(entry.executable, self._stream)
            self._replays += 1
        else:
            self._enqueue(entry)
            self._plain += 1
        self._messages += 1
        return entry

    def _stage(self, args: tuple[Any, ...], size: Any) -> _Staged:
        """Allocate the buffers of a new signature and resolve its kernel parameters."""
        ops = self._ops
        params: list[Any] = []
        inputs: list[npt.NDArray[Any]] = []
        outputs: list[npt.NDArray[Any]] = []
        uploads: list[tuple[int, int, int]] = []
        downloads: list[tuple[int, int, int]] = []
        keep: list[Any] = []
        first_shape: tuple[int, ...] | None = None
        for position, arg in enumerate(args):
            if isinstance(arg, In | Out):
                shape, dtype = (
                    (arg.array.shape, arg.array.dtype)
                    if isinstance(arg, In)
                    else (arg.shape, arg.dtype)
                )
                if first_shape is None:
                    first_shape = shape
                device = ops.device_buffer(shape, dtype)
                host = ops.host_buffer(shape, dtype)
                address, nbytes = ops.device_address(device), host.nbytes
                keep.append(device)
                params.append(device)
                if isinstance(arg, In):
                    inputs.append(host)
                    if nbytes:
                        uploads.append((address, int(host.ctypes.data), nbytes))
                if isinstance(arg, InOut | Out):
                    outputs.append(host)
                    if nbytes:
                        downloads.append((address, int(host.ctypes.data), nbytes))
            else:
                value = _baked(position, arg)[1]
                if hasattr(value, "__cuda_array_interface__"):
                    keep.append(value)
                params.append(value)
        grid, block = self._geometry(size, first_shape)
        return _Staged(tuple(params), grid, block, inputs, outputs, uploads, downloads, keep)

    def _geometry(
        self, size: Any, first_shape: tuple[int, ...] | None
    ) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        kernel = self.kernel
        limit = kernel.thread_limit  # also loads the kernel before any capture
        if self._grid is not None:
            return explicit_config(self._grid, self._block, max_threads_per_block=limit)
        if size is None:
            if first_shape is None:
                raise ValueError(
                    "this launch has no In/InOut/Out argument to size the grid by: give size= "
                    "to the call, or grid= and block= to the launcher"
                )
            size = first_shape[:3] if first_shape else 1
        config = kernel.config(size, self._block)
        if config.empty:
            raise ValueError(f"size {size!r} launches no thread: a message needs work to do")
        return config.grid3, config.block3

    def _enqueue(self, entry: _Staged) -> None:
        """Queue one message's calls: copies in, the kernel, copies out."""
        ops, stream = self._ops, self._stream
        for device, host, nbytes in entry.uploads:
            ops.copy_to_device(device, host, nbytes, stream)
        ops.launch(self.kernel, entry.grid, entry.block, entry.args, self.shared_mem, stream)
        for device, host, nbytes in entry.downloads:
            ops.copy_to_host(host, device, nbytes, stream)

    def _capture(self, entry: _Staged) -> int:
        """Capture :meth:`_enqueue` into a graph and return its instantiated executable."""
        ops, stream = self._ops, self._stream
        ops.begin_capture(stream)
        try:
            self._enqueue(entry)
        except BaseException as exc:
            # The capture always ends: a stream left capturing fails every later call.
            with contextlib.suppress(Exception):
                ops.destroy_graph(ops.end_capture(stream))
            if isinstance(exc, Exception):
                raise BackendError(
                    f"capturing {self.kernel.name!r} into a CUDA graph failed: {exc}"
                ) from exc
            raise
        try:
            graph = ops.end_capture(stream)
        except Exception as exc:
            raise BackendError(
                f"the CUDA graph capture of {self.kernel.name!r} was invalidated: {exc} (a call "
                "that cannot be captured ran on this thread during the capture)"
            ) from exc
        try:
            return ops.instantiate(graph, stream)
        except Exception as exc:
            raise BackendError(
                f"instantiating the CUDA graph of {self.kernel.name!r} failed: {exc}"
            ) from exc
        finally:
            ops.destroy_graph(graph)  # the executable does not need it

    def _make_room(self) -> None:
        while len(self._entries) >= self.max_graphs:
            _, evicted = self._entries.popitem(last=False)
            if evicted.executable:
                self._ops.destroy_executable(evicted.executable)
            self._evictions += 1

    async def _wait(self) -> None:
        ops, stream = self._ops, self._stream
        waiter = PollingWaiter()  # per wait: it binds to the running event loop
        waiter.begin()
        while not ops.done(stream):  # raises when the work failed
            try:
                await waiter.wait(True)
            except BaseException:
                # The queued work cannot be interrupted and writes the staging buffers:
                # wait for it before the cancellation (or interrupt) goes on.
                with anyio.CancelScope(shield=True):
                    while not ops.done(stream):
                        await waiter.wait(True)
                raise

    # -- state -----------------------------------------------------------------------------

    def _begin_message(self) -> None:
        with self._state:
            if self._closed:
                raise RuntimeError(f"{self!r} is closed")
            if self._busy:
                raise RuntimeError(
                    f"{self!r} is running another message: it runs one at a time (concurrent "
                    "launch_async calls take turns)"
                )
            self._busy = True

    def _end_message(self) -> None:
        with self._state:
            self._busy = False
            free = self._closed
        if free:
            self._free()

    @property
    def statistics(self) -> LauncherStatistics:
        """A snapshot of the counts (see :class:`LauncherStatistics`)."""
        return LauncherStatistics(
            messages=self._messages,
            captures=self._captures,
            replays=self._replays,
            plain_launches=self._plain,
            evictions=self._evictions,
            cached=len(self._entries),
        )

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        return self._closed

    def close(self) -> None:
        """Destroy every graph, free every buffer and close the stream; idempotent.

        While a message is in flight (a ``launch_async`` waiting in another task) the
        release happens when that message ends; later calls raise ``RuntimeError``.
        """
        with self._state:
            if self._closed:
                return
            self._closed = True
            if self._busy:
                return
        self._free()

    def _free(self) -> None:
        with self._state:
            if self._freed:
                return
            self._freed = True
        self._finalizer.detach()
        try:
            with self._ops.device_context():
                _destroy_all(self._ops, self._entries)
        finally:
            self._ops.close_stream(self._stream)

    def __enter__(self) -> MessageLauncher:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> MessageLauncher:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = "graph" if self.graph else "plain"
        where = self.kernel.backend.qualified_name
        return f"<MessageLauncher {self.kernel.name!r} ({mode}) on {where}>"


def _size_key(size: Any) -> Hashable:
    if size is None or isinstance(size, int):
        return size
    return tuple(int(extent) for extent in size)


def _cuda_kernel(kernel: CudaKernel | Kernel, backend: CudaBackend | str | None) -> CudaKernel:
    if isinstance(kernel, CudaKernel):
        if backend is not None and _resolve(backend) is not kernel.backend:
            raise ValueError(
                f"{kernel!r} was compiled for {kernel.backend.qualified_name}, not {backend!r}"
            )
        return kernel
    if isinstance(kernel, Kernel):
        if kernel.source is None:
            raise TypeError(
                f"kernel {kernel.name!r} has a Python body: a MessageLauncher captures CUDA C "
                "source kernels (kernel.source(...) or backend.compile_kernel)"
            )
        chosen = _resolve(backend if backend is not None else kernel.backend or "cuda")
        options = kernel.options
        assert isinstance(options, tuple)
        return chosen.compile_kernel(kernel.source, kernel.name, options)
    raise TypeError(
        f"expected a CudaKernel or a pdc_core source kernel, not {type(kernel).__name__}"
    )


def _resolve(backend: Any) -> CudaBackend:
    from ._backend import CudaBackend

    resolved = get_backend(backend) if isinstance(backend, str) else backend
    if not isinstance(resolved, CudaBackend):
        raise TypeError(f"a MessageLauncher runs on the cuda backend, not {resolved!r}")
    return resolved
