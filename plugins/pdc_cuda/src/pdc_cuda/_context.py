"""The CUDA contexts resident kernels run in: the bottom layer of pdc_cuda.

Why a context of their own: a CUDA context that holds a running kernel cannot load
code. Measured on an H200 (driver 580, CUDA 13.0): with one pdc kernel resident in the
process's primary context, any module load into that context (``cuModuleLoadData``,
CuPy's first use of an op, a new ``compile_kernel``, under ``CUDA_MODULE_LOADING``
``EAGER`` or ``LAZY``) and ``cudaFreeHost`` wait for the kernel to exit -- forever --
while a second context made by ``cuCtxCreate`` loads, allocates, launches and
synchronizes freely beside it. So a resident kernel is placed, by default, in a context
pdc owns, and everything else (CuPy, numba-cuda, other libraries, pdc's own
``compile_kernel``/``launch_kernel``/``run_python_kernel``) keeps the primary context.

The kinds of context pdc owns (the placements ``"own"`` and ``"green"``; the policy --
which placement, its default, ``PDC_CUDA_CONTEXT``, and ``"shared"``, the primary
context -- is :mod:`pdc_cuda._places`'s):

``"own"``
    An ordinary second context (``cuCtxCreate``), made lazily at the first resident
    launch that needs one (about 170 ms, measured with the probe above). Ordinary
    contexts time-slice against each other when both have work.
``"green"``
    A green context (``cuGreenCtxCreate``, CUDA >= 12.4) over a partition of the
    device's SMs (``green_sms``, rounded up by the driver to its partition granularity):
    work in it runs on SMs no other context uses. A one-block kernel in an 8-SM
    partition leaves 7 SMs idle (about 5% of an H200).

What may cross contexts: host memory that is pinned **portable** and mapped (the rings:
``MemoryKind.MAPPED`` is always allocated so) is addressable from every context, at the
same address under unified addressing. Device memory of the primary context (a CuPy
array) is not: passing one to a resident kernel raises :class:`CudaContextError`; the
kernel's state and its device-memory links are allocated in the kernel's context.

The layer talks to the driver through :class:`Driver`, whose one real implementation
is :class:`BindingsDriver` (NVIDIA's ``cuda.bindings``); tests put a fake in its place.
Every call that needs a context runs with the owning context pushed for the call only
(:meth:`PdcContext.current`), so the calling thread's current context -- the primary
one, CuPy's -- is unchanged afterwards.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from ._exceptions import CudaContextError

__all__ = [
    "DEFAULT_GREEN_SMS",
    "DEFAULT_MAX_CONTEXTS",
    "BindingsDriver",
    "ContextArray",
    "ContextKernel",
    "ContextStream",
    "CudaContextError",
    "Driver",
    "PdcContext",
    "ContextPool",
    "OwnedKind",
    "context_pool",
]

#: The kinds of context pdc owns: an ordinary one, or a green one over an SM partition.
OwnedKind = Literal["own", "green"]
#: SMs asked for a green context's partition (the driver rounds up).
DEFAULT_GREEN_SMS = 8
#: Contexts pdc may own per device and placement (``CudaBackend(max_contexts=)``). A
#: context is made only when every one holds a running kernel and the launch needs a
#: module none has loaded; each costs about 170 ms to make (measured on an H200) and
#: device memory of its own, and contexts with work time-slice the GPU: with n
#: contexts each holding a resident kernel (which always has work: it polls), each
#: kernel runs about 1/n of the time. Past 4 the latency cost dominates, and the
#: remedy is not another context but loading the kernels together
#: (``CudaBackend.preload_persistent_kernels``), which puts them in one.
DEFAULT_MAX_CONTEXTS = 4


class Driver(Protocol):
    """The CUDA driver calls a context pdc owns is built from.

    Calls marked *current* act on the context current to the calling thread; the
    others name their handles. Failures raise (any exception; :class:`BindingsDriver`
    raises :class:`CudaContextError` naming the call and CUDA's error name).
    """

    def create_context(self, device: int) -> Any:
        """An ordinary context on ``device`` (``cuCtxCreate``), not left current."""

    def create_green_context(self, device: int, sm_count: int) -> tuple[Any, Any, int]:
        """A green context over at least ``sm_count`` SMs: (green handle, its
        ``CUcontext``, the SMs it got), not left current."""

    def destroy_context(self, context: Any, green: Any) -> None:
        """Destroy a context made by this driver (``green`` is ``None`` for an ordinary one)."""

    def push(self, context: Any) -> None:
        """Make ``context`` current to this thread (``cuCtxPushCurrent``)."""

    def pop(self) -> None:
        """Restore the thread's previous context (``cuCtxPopCurrent``)."""

    def load_module(self, image: bytes) -> Any:
        """*current*: load PTX or a cubin (``cuModuleLoadData``)."""

    def get_function(self, module: Any, name: str) -> Any:
        """The kernel ``name`` of ``module`` (``cuModuleGetFunction``)."""

    def max_threads_per_block(self, function: Any) -> int:
        """``CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK`` of ``function``."""

    def create_stream(self, green: Any) -> Any:
        """*current*: a non-blocking stream (of green context ``green`` when given)."""

    def stream_done(self, stream: Any) -> bool:
        """``cuStreamQuery``: True when done, False while work runs; raises if it failed."""

    def stream_synchronize(self, stream: Any) -> None:
        """``cuStreamSynchronize``: wait for this stream only."""

    def destroy_stream(self, stream: Any) -> None:
        """``cuStreamDestroy``: returns at once; CUDA releases it when its work is over."""

    def mem_alloc(self, nbytes: int) -> int:
        """*current*: device memory (``cuMemAlloc``)."""

    def mem_free(self, address: int) -> None:
        """*current*: ``cuMemFree`` (waits for the context: only with no kernel running)."""

    def copy_to_device(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        """*current*: ``cuMemcpyHtoDAsync`` from host address ``src``."""

    def copy_to_host(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        """*current*: ``cuMemcpyDtoHAsync`` into host address ``dst``."""

    def host_device_pointer(self, host: int) -> int:
        """*current*: the device address of mapped host memory in this context
        (``cuMemHostGetDevicePointer``); raises for memory not mapped here (pinned
        memory allocated without the portable flag by another context)."""

    def launch(
        self,
        function: Any,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        args: Sequence[int],
        stream: Any,
    ) -> None:
        """*current*: ``cuLaunchKernel`` with 64-bit integer arguments."""


class ContextStream:
    """A non-blocking stream of a :class:`PdcContext` (what a resident kernel runs on).

    :attr:`done` never blocks; :meth:`synchronize` waits for this stream only.
    """

    def __init__(self, context: PdcContext, handle: Any) -> None:
        self.context = context
        self.handle = handle
        self._closed = False

    @property
    def done(self) -> bool:
        """True once queued work is done; raises if it failed (a faulted kernel)."""
        with self.context.current():  # a stream is queried in its own context
            return self.context.driver.stream_done(self.handle)

    def synchronize(self) -> None:
        """Wait for the work queued on this stream (never the context or the device)."""
        with self.context.current():
            self.context.driver.stream_synchronize(self.handle)

    def discard(self) -> None:
        """Drop the stream without waiting (``cuStreamDestroy`` returns at once)."""
        if self._closed:
            return
        self._closed = True
        with self.context.current():
            self.context.driver.destroy_stream(self.handle)

    def close(self) -> None:
        """Wait for the stream, then drop it (dropped even when waiting raises)."""
        try:
            self.synchronize()
        finally:
            self.discard()

    def __repr__(self) -> str:
        return f"<ContextStream of {self.context!r}>"


class ContextArray:
    """Device memory allocated in a :class:`PdcContext`: :attr:`address` is what a kernel
    in that context dereferences. Freed by :meth:`free` (which waits for the context,
    so the owner calls it only once no kernel runs there) or when the context closes."""

    def __init__(self, context: PdcContext, address: int, nbytes: int) -> None:
        self.context = context
        self.address = address
        self.nbytes = nbytes
        self._freed = False

    def get(self, out: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """Copy the memory into host array ``out`` on a side stream of the context and
        wait for that stream only; returns ``out``."""
        self._check_size(out)
        self.context.copy(
            lambda driver, stream: driver.copy_to_host(
                int(out.ctypes.data), self.address, out.nbytes, stream
            )
        )
        return out

    def set(self, host: npt.NDArray[Any], offset: int = 0) -> None:
        """Copy host array ``host`` to ``offset`` bytes into the memory (side stream, waited)."""
        source = np.ascontiguousarray(host)
        if offset < 0 or offset + source.nbytes > self.nbytes:
            raise ValueError(
                f"{source.nbytes} bytes at offset {offset} do not fit {self.nbytes} bytes"
            )
        self.context.copy(
            lambda driver, stream: driver.copy_to_device(
                self.address + offset, int(source.ctypes.data), source.nbytes, stream
            )
        )

    def free(self) -> None:
        """Give the memory back (``cuMemFree``: call only with no kernel running in the
        context); once."""
        if self._freed:
            return
        self._freed = True
        self.context.free(self)

    def _check_size(self, host: npt.NDArray[Any]) -> None:
        if not host.flags.c_contiguous or host.nbytes != self.nbytes:
            raise ValueError(
                f"a copy of {self.nbytes} device bytes needs a C-contiguous host array of "
                f"as many bytes, not {host.nbytes}"
            )


class ContextKernel:
    """A kernel loaded into a :class:`PdcContext`; launched with 64-bit arguments."""

    def __init__(self, context: PdcContext, function: Any, name: str) -> None:
        self.context = context
        self.function = function
        self.name = name

    @property
    def max_threads_per_block(self) -> int:
        """The most threads per block this kernel can launch with (registers permitting)."""
        return self.context.driver.max_threads_per_block(self.function)

    def launch(
        self,
        grid: Sequence[int],
        block: Sequence[int],
        args: Sequence[Any],
        *,
        stream: ContextStream,
    ) -> None:
        """Queue one launch on ``stream`` (a stream of the same context). ``args`` are
        integers (addresses) or :class:`ContextArray` of the same context; anything
        else -- a CuPy array of the primary context above all -- raises
        :class:`CudaContextError`."""
        if stream.context is not self.context:
            raise CudaContextError(f"{stream!r} is not a stream of {self.context!r}")
        words = [self.context.argument(arg, index) for index, arg in enumerate(args)]
        with self.context.current():
            self.context.driver.launch(
                self.function, _dim3(grid), _dim3(block), words, stream.handle
            )
        self.context.launched(stream)

    def __repr__(self) -> str:
        return f"<ContextKernel {self.name!r} in {self.context!r}>"


def _finished(stream: ContextStream) -> bool:
    try:
        return stream.done
    except Exception:  # a failed stream runs nothing any more
        return True


def _dim3(dims: Sequence[int]) -> tuple[int, int, int]:
    padded = [int(value) for value in dims] + [1, 1, 1]
    return padded[0], padded[1], padded[2]


#: ``compile(source, options, arch) -> image``: what :meth:`PdcContext.load_source` uses.
Compiler = Callable[[str, tuple[str, ...], str], bytes]


def nvrtc_compiler(source: str, options: tuple[str, ...], arch: str) -> bytes:
    """Compile with NVRTC to a cubin for ``arch`` (``sm_XY``), loaded as it is."""
    from ._nvrtc import compile_to_cubin

    return compile_to_cubin(source, options=options, arch=arch, what="a resident kernel")


class PdcContext:
    """One CUDA context pdc owns on one device: module loads, streams, allocations and
    copies as services of one object (a stream or an array knows its context; the
    context knows no kernel). Made lazily: nothing reaches the driver until the first
    service is asked for.

    ``kind`` is ``"own"`` (``cuCtxCreate``) or ``"green"`` (a green context over
    ``green_sms`` SMs). ``compute_capability`` names the architecture sources are
    compiled for. Thread-safe.
    """

    def __init__(
        self,
        driver: Driver,
        device: int,
        kind: OwnedKind = "own",
        *,
        compute_capability: tuple[int, int] = (9, 0),
        green_sms: int = DEFAULT_GREEN_SMS,
        compiler: Compiler = nvrtc_compiler,
    ) -> None:
        if kind not in ("own", "green"):
            raise ValueError(f"a context pdc owns is 'own' or 'green', not {kind!r}")
        if green_sms < 1:
            raise ValueError(f"green_sms must be at least 1, not {green_sms}")
        self.driver = driver
        self.device = device
        self.kind = kind
        self.compute_capability = compute_capability
        self.green_sms = green_sms
        self._compiler = compiler
        self._lock = threading.RLock()
        self._handle: Any = None
        self._green: Any = None
        #: SMs of the green partition (None for an ordinary context).
        self.sm_count: int | None = None
        # The shared state below is guarded by ``_lock`` (an RLock: services nest);
        # driver calls are made outside it, except in close().
        #: Kernels loaded here, by (source, name, options): added by load_source() only,
        #: while no kernel runs here (a load would wait for it); cleared by close().
        self._kernels: dict[tuple[str, str, tuple[str, ...]], ContextKernel] = {}
        #: Every array allocated here and not yet freed: added by allocate(); removed
        #: when its cuMemFree is made (_free_now) or by close(), which frees them all.
        self._arrays: list[ContextArray] = []
        #: Streams a kernel was launched on (launched()), until collect() sees them
        #: done; may hold streams already done (``busy`` queries each, changing
        #: nothing). Empty in a context no kernel was launched in since the last collect.
        self._running: list[ContextStream] = []
        #: This context's one deferral queue: arrays whose free was asked for while a
        #: kernel ran here (cuMemFree would wait for it). Appended by free() only while
        #: busy; emptied by collect() once no kernel runs, and by close(). Each entry is
        #: still in ``_arrays``.
        self._deferred: list[ContextArray] = []
        #: Set once by close(); every later service raises.
        self._closed = False

    # -- the context itself -------------------------------------------------------------

    def _ensure(self) -> Any:
        with self._lock:
            if self._closed:
                raise CudaContextError(f"{self!r} is closed")
            if self._handle is None:
                if self.kind == "green":
                    self._green, self._handle, self.sm_count = self.driver.create_green_context(
                        self.device, self.green_sms
                    )
                else:
                    self._handle = self.driver.create_context(self.device)
            return self._handle

    @property
    def busy(self) -> bool:
        """Whether a kernel launched here may still run: a pure query of its streams
        (never blocks, changes nothing). A busy context loads no module and frees no
        memory: both would wait for the running kernel. :meth:`collect` frees what
        was deferred once it is not."""
        with self._lock:
            running = list(self._running)
        return any(not _finished(stream) for stream in running)

    def collect(self) -> bool:
        """Forget the streams seen done and, once no kernel runs here, make the frees
        deferred meanwhile (cuMemFree no longer waits). Returns whether a kernel still
        runs here. Never blocks; called by the services that would wait (a load, a
        free) and by the pool before it picks a context."""
        with self._lock:
            running = list(self._running)
        done = [stream for stream in running if _finished(stream)]
        with self._lock:
            # Streams launched since the snapshot stay: they were not queried.
            self._running = [stream for stream in self._running if stream not in done]
            busy = bool(self._running)
            deferred: list[ContextArray] = [] if busy else self._deferred
            if not busy:
                self._deferred = []
        for array in deferred:
            self._free_now(array)
        return busy

    def has_loaded(self, key: tuple[str, str, tuple[str, ...]]) -> bool:
        """Whether the kernel of ``key`` (source, name, options) is loaded here already."""
        with self._lock:
            return key in self._kernels

    def launched(self, stream: ContextStream) -> None:
        """Record that a kernel now runs on ``stream`` (see :attr:`busy`; the stream
        stays recorded until :meth:`collect` sees it done)."""
        with self._lock:
            self._running.append(stream)

    @property
    def created(self) -> bool:
        """Whether the context exists yet (it is made at the first service asked for)."""
        return self._handle is not None

    @contextlib.contextmanager
    def current(self) -> Iterator[None]:
        """Make this context current to the calling thread for the block, then restore
        the previous one (the primary context CuPy uses stays untouched)."""
        handle = self._ensure()
        self.driver.push(handle)
        try:
            yield
        finally:
            self.driver.pop()

    def close(self) -> None:
        """Free every array and destroy the context. Only when no kernel runs in it
        (the owner's residency bookkeeping ensures that); idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            handle, green = self._handle, self._green
            self._handle = self._green = None
            arrays, self._arrays = self._arrays, []
            self._deferred = []  # each is in ``arrays``, freed below
            self._kernels.clear()
        if handle is None:
            return
        self.driver.push(handle)
        try:
            for array in arrays:
                array._freed = True
                self.driver.mem_free(array.address)
        finally:
            self.driver.pop()
        self.driver.destroy_context(handle, green)

    # -- services -----------------------------------------------------------------------

    def load_source(self, source: str, name: str, options: tuple[str, ...]) -> ContextKernel:
        """Compile ``source`` and load it into this context; the kernel ``name`` of it.
        Cached per source, name and options. A load while a kernel runs here would
        wait for it, so it raises :class:`CudaContextError` then (the pool picks
        another context: :class:`ContextPool`)."""
        key = (source, name, options)
        with self._lock:
            cached = self._kernels.get(key)
        if cached is not None:
            return cached
        if self.collect():
            raise CudaContextError(
                f"cannot load a module into {self!r} while a kernel runs in it: the load "
                "would wait for that kernel to exit"
            )
        major, minor = self.compute_capability
        image = self._compiler(source, options, f"sm_{major}{minor}")
        with self.current():
            module = self.driver.load_module(image)
            function = self.driver.get_function(module, name)
        kernel = ContextKernel(self, function, name)
        with self._lock:
            return self._kernels.setdefault(key, kernel)

    def create_stream(self) -> ContextStream:
        """A new non-blocking stream of this context."""
        with self.current():
            return ContextStream(self, self.driver.create_stream(self._green))

    def allocate(self, nbytes: int) -> ContextArray:
        """``nbytes`` of device memory in this context (uninitialised)."""
        with self.current():
            address = int(self.driver.mem_alloc(max(int(nbytes), 1)))
        array = ContextArray(self, address, int(nbytes))
        with self._lock:
            self._arrays.append(array)
        return array

    def upload(self, host: npt.NDArray[Any]) -> ContextArray:
        """Device memory in this context holding a copy of ``host``."""
        source = np.ascontiguousarray(host)
        array = self.allocate(source.nbytes)
        if source.nbytes:
            array.set(source)
        return array

    def free(self, array: ContextArray) -> None:
        """``cuMemFree`` of ``array`` now, or, while a kernel runs here, at the first
        :meth:`collect` that finds none (``cuMemFree`` waits for the context's kernels)."""
        if self.collect():
            with self._lock:
                self._deferred.append(array)
            return
        self._free_now(array)

    def _free_now(self, array: ContextArray) -> None:
        with self._lock:
            if array not in self._arrays:
                return  # freed by close()
            self._arrays.remove(array)
        with self.current():
            self.driver.mem_free(array.address)

    def copy(self, issue: Callable[[Driver, Any], None]) -> None:
        """Issue one copy on a fresh side stream of this context and wait for that stream
        only (never for a kernel running on another stream of the context)."""
        with self.current():
            stream = self.driver.create_stream(self._green)
            try:
                issue(self.driver, stream)
                self.driver.stream_synchronize(stream)
            finally:
                self.driver.destroy_stream(stream)

    def mapped_address(self, host: npt.NDArray[Any] | int) -> int:
        """The address a kernel in this context uses for mapped host memory ``host``.

        Raises :class:`CudaContextError` when the memory is not mapped into this context:
        pinned memory must be allocated portable (``MemoryKind.MAPPED`` is) to be seen
        from a context other than the one that allocated it.
        """
        address = host if isinstance(host, int) else int(host.ctypes.data)
        try:
            with self.current():
                return int(self.driver.host_device_pointer(address))
        except CudaContextError:
            raise
        except Exception as exc:
            raise CudaContextError(
                f"host memory at 0x{address:x} is not mapped into {self!r}: a resident kernel "
                "in a context of its own can only reach pinned memory allocated mapped and "
                "portable (MemoryKind.MAPPED), not memory pinned for one context only "
                f"({type(exc).__name__}: {exc})"
            ) from exc

    def argument(self, value: Any, index: int) -> int:
        """One launch argument as a 64-bit word: an integer or a :class:`ContextArray` of
        this context. Anything else raises :class:`CudaContextError` (a device array of
        the primary context is not addressable here)."""
        if isinstance(value, ContextArray):
            if value.context is not self:
                raise CudaContextError(
                    f"argument {index} is device memory of {value.context!r}, not of {self!r}"
                )
            return value.address
        if isinstance(value, int | np.integer) and not isinstance(value, bool):
            return int(value)
        raise CudaContextError(
            f"argument {index} ({type(value).__name__}) cannot be passed to a kernel in "
            f"{self!r}: " + refuse_foreign_memory_reason(value)
        )

    def __repr__(self) -> str:
        detail = f", {self.sm_count} SMs" if self.sm_count is not None else ""
        return f"<PdcContext {self.kind} on cuda:{self.device}{detail}>"


def refuse_foreign_memory_reason(value: Any) -> str:
    """Why ``value`` may not reach a kernel in a context pdc owns (one sentence)."""
    if hasattr(value, "__cuda_array_interface__") or hasattr(value, "__dlpack__"):
        return (
            "device memory of the primary context (CuPy, numba-cuda, ...) is not addressable "
            "from another context. Give the kernel its data through its state or its rings, "
            "or place it with context='shared'"
        )
    return "only integers (addresses) and memory allocated in the kernel's context cross"


# -- the one real driver ----------------------------------------------------------------


class BindingsDriver:
    """:class:`Driver` through NVIDIA's ``cuda.bindings`` (``cuda-bindings`` 12.4 or newer,
    13 included: a dependency of pdc-cuda; the error below covers an environment that
    lacks it). Every driver call goes through :meth:`_call`, which names the call in
    its error."""

    def __init__(self) -> None:
        try:
            driver = importlib.import_module("cuda.bindings.driver")
        except ImportError as exc:
            raise CudaContextError(
                "a context of pdc's own for resident kernels needs NVIDIA's cuda-bindings "
                "(pip install cuda-bindings); or place resident kernels in the primary "
                "context with context='shared' (PDC_CUDA_CONTEXT=shared)"
            ) from exc
        self._cu = driver
        self._call("cuInit", 0)

    def _call(self, name: str, *args: Any) -> Any:
        """``cuda.bindings.driver.<name>(*args)``: its value (``None``, one value or a
        tuple of them), or :class:`CudaContextError` naming the call and its ``CUresult``."""
        return self._check(getattr(self._cu, name)(*args), name)

    def _check(self, result: Any, call: str) -> Any:
        if not isinstance(result, tuple):
            result = (result,)
        status = result[0]
        if int(status) != 0:
            _, name = self._cu.cuGetErrorName(status)
            label = name.decode() if isinstance(name, bytes) else str(name)
            raise CudaContextError(f"{call} failed: {label} ({int(status)})")
        values = result[1:]
        if not values:
            return None
        return values[0] if len(values) == 1 else values

    def create_context(self, device: int) -> Any:
        handle = self._call("cuDeviceGet", device)
        try:  # cuda-bindings 13: cuCtxCreate(ctxCreateParams, flags, dev)
            context = self._call("cuCtxCreate", None, 0, handle)
        except TypeError:  # cuda-bindings 12: cuCtxCreate(flags, dev)
            context = self._call("cuCtxCreate", 0, handle)
        self._call("cuCtxPopCurrent")  # created current: undo
        return context

    def create_green_context(self, device: int, sm_count: int) -> tuple[Any, Any, int]:
        cu = self._cu
        handle = self._call("cuDeviceGet", device)
        sm = cu.CUdevResourceType.CU_DEV_RESOURCE_TYPE_SM
        whole = self._call("cuDeviceGetDevResource", handle, sm)
        groups, _count, _rest = self._call("cuDevSmResourceSplitByCount", 1, whole, 0, sm_count)
        part = groups[0]
        desc = self._call("cuDevResourceGenerateDesc", [part], 1)
        flags = cu.CUgreenCtxCreate_flags.CU_GREEN_CTX_DEFAULT_STREAM
        green = self._call("cuGreenCtxCreate", desc, handle, flags)
        context = self._call("cuCtxFromGreenCtx", green)
        return green, context, int(part.sm.smCount)

    def destroy_context(self, context: Any, green: Any) -> None:
        if green is not None:
            self._call("cuGreenCtxDestroy", green)
        else:
            self._call("cuCtxDestroy", context)

    def push(self, context: Any) -> None:
        self._call("cuCtxPushCurrent", context)

    def pop(self) -> None:
        self._call("cuCtxPopCurrent")

    def load_module(self, image: bytes) -> Any:
        return self._call("cuModuleLoadData", image)

    def get_function(self, module: Any, name: str) -> Any:
        function = self._call("cuModuleGetFunction", module, name.encode())
        if hasattr(self._cu, "cuFuncLoad"):  # CUDA >= 12.4
            # Under lazy loading a function is loaded at its first launch, which waits
            # for the kernels running in its context: load it now, while none does.
            self._call("cuFuncLoad", function)
        return function

    def max_threads_per_block(self, function: Any) -> int:
        attribute = self._cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK
        return int(self._call("cuFuncGetAttribute", attribute, function))

    def create_stream(self, green: Any) -> Any:
        flags = self._cu.CUstream_flags.CU_STREAM_NON_BLOCKING
        if green is not None:
            return self._call("cuGreenCtxStreamCreate", green, flags, 0)
        return self._call("cuStreamCreate", flags)

    def stream_done(self, stream: Any) -> bool:
        (status,) = self._cu.cuStreamQuery(stream)
        if status == self._cu.CUresult.CUDA_ERROR_NOT_READY:  # the one status not an error
            return False
        self._check((status,), "cuStreamQuery")
        return True

    def stream_synchronize(self, stream: Any) -> None:
        self._call("cuStreamSynchronize", stream)

    def destroy_stream(self, stream: Any) -> None:
        self._call("cuStreamDestroy", stream)

    def mem_alloc(self, nbytes: int) -> int:
        return int(self._call("cuMemAlloc", nbytes))

    def mem_free(self, address: int) -> None:
        self._call("cuMemFree", address)

    def copy_to_device(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        self._call("cuMemcpyHtoDAsync", dst, src, nbytes, stream)

    def copy_to_host(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        self._call("cuMemcpyDtoHAsync", dst, src, nbytes, stream)

    def host_device_pointer(self, host: int) -> int:
        return int(self._call("cuMemHostGetDevicePointer", host, 0))

    def launch(
        self,
        function: Any,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        args: Sequence[int],
        stream: Any,
    ) -> None:
        params = (tuple(args), tuple(ctypes.c_uint64 for _ in args))
        self._call("cuLaunchKernel", function, *grid, *block, 0, stream, params, 0)


class ContextPool:
    """The contexts pdc owns on one device, of one kind: where each resident launch loads.

    A context holding a running kernel can load no module (the load would wait for the
    kernel), so a launch whose kernels are already loaded in some context uses it (its
    kernels then share that context and run concurrently); otherwise the kernels are
    loaded into a context where nothing runs, made if none is idle. Launch kernels that
    must share a context together (a pipeline loads every stage into one before
    launching any). Ordinary contexts time-slice against each other when several have
    work; green contexts run on disjoint SMs.
    """

    def __init__(self, factory: Callable[[], PdcContext]) -> None:
        self._factory = factory
        self._lock = threading.Lock()
        #: The contexts made so far, in order: appended by context_for() (under
        #: ``_lock``, at most ``limit`` of them), emptied by close().
        self.contexts: list[PdcContext] = []

    def context_for(
        self,
        keys: Sequence[tuple[str, str, tuple[str, ...]]],
        limit: int = DEFAULT_MAX_CONTEXTS,
    ) -> PdcContext:
        """A context that holds every kernel of ``keys`` (source, name, options) already,
        else one where no kernel runs, else a new one while there are fewer than
        ``limit``; at the limit, :class:`CudaContextError` saying what to do."""
        with self._lock:
            contexts = list(self.contexts)
        for context in contexts:
            if all(context.has_loaded(key) for key in keys):
                return context
        for context in contexts:
            if not context.collect():
                return context
        with self._lock:
            if len(self.contexts) >= limit:
                where = f"{self.contexts[0]!r}".replace("<PdcContext ", "").rstrip(">")
                raise CudaContextError(
                    f"every one of the {limit} context(s) pdc may own ({where}) runs a resident "
                    "kernel, and this launch needs a module none of them has loaded (a load "
                    "beside a running kernel would wait for it). Load the kernels together "
                    "before launching them (backend.preload_persistent_kernels), stop one, "
                    f"or allow more contexts: CudaBackend(max_contexts={limit + 1}) (each one "
                    "more time-slices the GPU with the others)"
                )
            context = self._factory()
            self.contexts.append(context)
        return context

    def close(self) -> None:
        """Close every context (only once no kernel runs in any)."""
        with self._lock:
            contexts, self.contexts = self.contexts, []
        for context in contexts:
            context.close()


_pools: dict[tuple[int, OwnedKind, int], ContextPool] = {}
_pools_lock = threading.Lock()


def context_pool(
    device: int,
    kind: OwnedKind,
    *,
    compute_capability: tuple[int, int],
    green_sms: int = DEFAULT_GREEN_SMS,
    driver: Callable[[], Driver] = BindingsDriver,
) -> ContextPool:
    """The process's :class:`ContextPool` of ``kind`` on ``device`` (one per device, kind
    and partition size: contexts are costly, and every backend of a device shares them).
    Nothing reaches the driver until a context is first used."""
    key = (device, kind, green_sms if kind == "green" else 0)
    with _pools_lock:
        pool = _pools.get(key)
        if pool is None:
            made: list[Driver] = []

            def factory() -> PdcContext:
                if not made:
                    made.append(driver())
                return PdcContext(
                    made[0],
                    device,
                    kind,
                    compute_capability=compute_capability,
                    green_sms=green_sms,
                )

            pool = ContextPool(factory)
            _pools[key] = pool
        return pool
