"""Where a resident kernel runs: the placement policy, and the one interface launches
and pipelines go through.

The policy: a resident kernel is placed by a kind (:data:`CONTEXT_KINDS`): the launch
option ``context=``, else the backend's ``context=`` setting, else the environment
variable ``PDC_CUDA_CONTEXT``, else :data:`DEFAULT_CONTEXT` (:func:`context_kind`).

``"own"`` (default)
    A context pdc owns (:mod:`pdc_cuda._context`), so that nothing the rest of the
    process loads or frees in the primary context waits for the kernel.
``"green"``
    A green context pdc owns, over a partition of the device's SMs. Whether the primary
    context may load modules beside a kernel running in one is what
    ``benchmarks/cuda_contexts.py`` measures, so it is not the default.
``"shared"``
    The primary context, as before: no second context. A pdc operation that would then
    wait for the kernel (a module load, a free of cached memory) raises at once instead
    (:mod:`pdc_cuda._residency`).

:func:`place_for` turns a kind into its place, given the device's services.

A :class:`ResidentPlace` compiles and loads a resident kernel, makes its stream, puts
its state and its device-memory links in device memory, and gives the device address
of the ring region -- all in the context the kernel runs in:

* :class:`DriverPlace`: a context pdc owns (``"own"`` or ``"green"``,
  :mod:`pdc_cuda._context`), through the driver API. Everything the kernel uses is
  allocated in that context; device arrays of the primary context are refused.
* :class:`PrimaryPlace`: the primary context, through the backend's own services
  (CuPy) -- the ``"shared"`` placement, and the host build (whose "device" is CPU
  threads and never blocks).

Nothing here knows the backend class: a :class:`PrimaryPlace` is given the services it
uses (:class:`PrimaryServices`, which ``CudaBackend`` provides).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from pdc_core import Backend
from pdc_core.backend import RingMemory

from ._context import (
    DEFAULT_MAX_CONTEXTS,
    ContextKernel,
    ContextPool,
    CudaContextError,
    OwnedKind,
    context_pool,
    refuse_foreign_memory_reason,
)
from ._kernels import compile_options
from ._properties import CudaDeviceProperties
from ._residency import Residency, ResidentKernelBlocks

__all__ = [
    "CONTEXT_ENV",
    "CONTEXT_KINDS",
    "DEFAULT_CONTEXT",
    "BesideServices",
    "ContextKind",
    "DriverPlace",
    "LaunchSite",
    "PlaceServices",
    "PrimaryPlace",
    "PrimaryServices",
    "ResidentPlace",
    "check_beside_resident",
    "context_kind",
    "place_for",
    "ring_owner",
]

ContextKind = Literal["own", "green", "shared"]
#: The placements of resident kernels, the default first.
CONTEXT_KINDS: tuple[ContextKind, ...] = ("own", "green", "shared")
#: The placement when neither the call nor ``PDC_CUDA_CONTEXT`` names one.
DEFAULT_CONTEXT: ContextKind = "own"
#: The environment variable that sets the default placement.
CONTEXT_ENV = "PDC_CUDA_CONTEXT"


def context_kind(value: str | None = None) -> ContextKind:
    """The placement ``value`` names, or ``PDC_CUDA_CONTEXT``'s, or :data:`DEFAULT_CONTEXT`.

    Raises ``ValueError`` naming the accepted values for anything else.
    """
    chosen = value if value is not None else os.environ.get(CONTEXT_ENV) or DEFAULT_CONTEXT
    if chosen not in CONTEXT_KINDS:
        source = "context=" if value is not None else f"{CONTEXT_ENV}="
        raise ValueError(
            f"{source}{chosen!r} is not a placement for resident kernels; use one of "
            + ", ".join(repr(kind) for kind in CONTEXT_KINDS)
        )
    return chosen


#: (source, kernel name, compiler options): one kernel to load.
KernelSpec = tuple[str, str, tuple[str, ...]]


class ResidentPlace(Protocol):
    """The services a resident kernel's launch needs, in the context it runs in."""

    @property
    def kind(self) -> ContextKind:
        """The placement: ``"own"``, ``"green"`` or ``"shared"``."""

    @property
    def shares_primary(self) -> bool:
        """Whether kernels placed here run in the primary context (then pdc refuses
        operations that would wait for them)."""

    def compile(self, specs: Sequence[KernelSpec]) -> list[Any]:
        """Compile and load every kernel of ``specs`` into one context, before any
        launch; each result has ``max_threads_per_block`` and ``launch(grid, block,
        args, stream=)``."""

    def create_stream(self, kernel: Any) -> Any:
        """A non-blocking stream in ``kernel``'s context (``done``, ``synchronize``,
        ``discard``)."""

    def upload(self, kernel: Any, host: npt.NDArray[Any]) -> Any:
        """Device memory in ``kernel``'s context holding a copy of ``host``."""

    def address(self, array: Any) -> int:
        """The device address of memory from :meth:`upload`."""

    def read(self, array: Any, out: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """Copy device memory into ``out`` on a side stream, waiting for it only."""

    def write(self, array: Any, data: npt.NDArray[Any], offset: int) -> None:
        """Copy ``data``'s bytes to ``offset`` in device memory (side stream, waited)."""

    def region_address(self, kernel: Any, memory: RingMemory) -> int:
        """The address ``kernel`` uses for the (mapped) ring region ``memory``."""

    def partition(self, kernel: Any) -> int | None:
        """The SMs ``kernel`` (from :meth:`compile`) may run on when its context has a
        partition of the device's SMs (a green context's), else None: the whole device."""


def ring_owner(memory: RingMemory) -> npt.NDArray[Any]:
    """The host allocation a ring region lies in (its own array, or its base's)."""
    return memory.owner if isinstance(memory.owner, np.ndarray) else memory.base


def check_state(state: Any, place: str) -> npt.NDArray[Any] | None:
    """A persistent kernel's initial state as host memory to copy in; a device array
    (memory of the primary context) raises :class:`CudaContextError` naming ``place``."""
    if state is None:
        return None
    if isinstance(state, np.ndarray):
        return np.ascontiguousarray(state)
    raise CudaContextError(
        f"a persistent kernel's state must be a NumPy array (pdc copies it into the "
        f"kernel's own context, {place}), not {type(state).__name__}: "
        + refuse_foreign_memory_reason(state)
    )


class PrimaryServices(Protocol):
    """What :class:`PrimaryPlace` uses of a backend (``CudaBackend`` has all of it)."""

    def compile_kernel(self, source: str, name: str, options: tuple[str, ...] = ()) -> Any:
        """Compile and load into the primary context."""

    def create_stream(self) -> Any:
        """A non-blocking stream of the primary context."""

    def to_device(self, host: npt.NDArray[Any], out: Any = None, stream: Any = None) -> Any:
        """A device copy of ``host``."""

    def device_pointer(self, host: npt.NDArray[Any]) -> int:
        """The device address of mapped host memory."""

    def device_context(self) -> contextlib.AbstractContextManager[Any]:
        """The device current for CuPy."""


class PrimaryPlace:
    """Resident kernels in the primary context, through the backend's services.

    ``shares_primary`` is True for the ``"shared"`` placement on a GPU (then the backend
    refuses what would wait for the kernels) and False for the host build outside its
    ``"shared"`` placement: its kernels are CPU threads that nothing waits for, so it
    stands for a context of their own (``kind``).
    """

    def __init__(
        self,
        services: PrimaryServices,
        *,
        shares_primary: bool = True,
        kind: ContextKind = "shared",
    ) -> None:
        self.services = services
        self._shares = shares_primary
        self._kind = kind

    @property
    def kind(self) -> ContextKind:
        return self._kind

    @property
    def shares_primary(self) -> bool:
        return self._shares

    def compile(self, specs: Sequence[KernelSpec]) -> list[Any]:
        return [self.services.compile_kernel(*spec) for spec in specs]

    def create_stream(self, kernel: Any) -> Any:
        return self.services.create_stream()

    def upload(self, kernel: Any, host: npt.NDArray[Any]) -> Any:
        return self.services.to_device(host)

    def address(self, array: Any) -> int:
        return int(array.data.ptr)

    @contextlib.contextmanager
    def _side_stream(self) -> Iterator[Any]:
        side = self.services.create_stream()
        try:
            with self.services.device_context():
                yield side.cupy
            side.synchronize()
        finally:
            side.close()

    def read(self, array: Any, out: npt.NDArray[Any]) -> npt.NDArray[Any]:
        with self._side_stream() as stream:
            host = array.get(stream=stream)
        np.copyto(out, np.asarray(host).reshape(out.shape).view(out.dtype))
        return out

    def write(self, array: Any, data: npt.NDArray[Any], offset: int) -> None:
        raw = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
        with self._side_stream() as stream:
            array[offset : offset + raw.nbytes].set(raw, stream=stream)

    def partition(self, kernel: Any) -> int | None:
        return None

    def region_address(self, kernel: Any, memory: RingMemory) -> int:
        owner = ring_owner(memory)
        return self.services.device_pointer(owner) + (memory.address - int(owner.ctypes.data))


class DriverPlace:
    """Resident kernels in contexts pdc owns (``"own"``/``"green"``), from ``pool``."""

    def __init__(
        self, pool: ContextPool, kind: OwnedKind, max_contexts: int = DEFAULT_MAX_CONTEXTS
    ) -> None:
        self.pool = pool
        self._kind = kind
        #: The most contexts ``pool`` may make for this place's launches.
        self.max_contexts = max_contexts

    @property
    def kind(self) -> ContextKind:
        return self._kind

    @property
    def shares_primary(self) -> bool:
        return False

    def compile(self, specs: Sequence[KernelSpec]) -> list[Any]:
        full = [(source, name, compile_options(options)) for source, name, options in specs]
        context = self.pool.context_for(full, self.max_contexts)
        return [context.load_source(*spec) for spec in full]

    def create_stream(self, kernel: ContextKernel) -> Any:
        return kernel.context.create_stream()

    def upload(self, kernel: ContextKernel, host: npt.NDArray[Any]) -> Any:
        return kernel.context.upload(host)

    def address(self, array: Any) -> int:
        return int(array.address)

    def read(self, array: Any, out: npt.NDArray[Any]) -> npt.NDArray[Any]:
        raw = np.empty(array.nbytes, np.uint8)
        array.get(raw)
        np.copyto(out, raw.view(out.dtype).reshape(out.shape))
        return out

    def write(self, array: Any, data: npt.NDArray[Any], offset: int) -> None:
        array.set(np.ascontiguousarray(data).view(np.uint8).reshape(-1), offset)

    def region_address(self, kernel: ContextKernel, memory: RingMemory) -> int:
        owner = ring_owner(memory)
        base = kernel.context.mapped_address(owner)
        return base + (memory.address - int(owner.ctypes.data))

    def partition(self, kernel: ContextKernel) -> int | None:
        return kernel.context.sm_count


@dataclass(frozen=True)
class LaunchSite:
    """Everything a resident launch needs of the device it launches on (the backend
    builds it; the launch code never sees the backend class)."""

    #: The backend the resident kernel reports (the contract's ``ResidentKernel.backend``).
    backend: Backend
    properties: CudaDeviceProperties
    #: Raises :class:`~pdc_core.CapabilityError` naming the action when the device
    #: cannot map host memory.
    require_mapped_memory: Callable[[str], None]
    residency: Residency
    place: ResidentPlace

    @property
    def name(self) -> str:
        """The device's qualified name (``cuda:0``)."""
        return self.backend.qualified_name


class PlaceServices(PrimaryServices, Protocol):
    """What :func:`place_for` needs of a device (``CudaBackend`` has all of it)."""

    @property
    def device(self) -> int:
        """The device index."""

    @property
    def properties(self) -> CudaDeviceProperties:
        """The device's properties (the architecture a context compiles for)."""

    @property
    def green_sms(self) -> int:
        """SMs asked for a green context's partition."""

    @property
    def max_contexts(self) -> int:
        """Contexts pdc may own per placement on the device."""


def place_for(kind: ContextKind, services: PlaceServices) -> ResidentPlace:
    """The place of placement ``kind`` on ``services``'s device: the primary context
    through the device's own services (``"shared"``), else a context pdc owns, from the
    process's pool of that kind on the device (at most ``services.max_contexts``)."""
    if kind == "shared":
        return PrimaryPlace(services)
    props = services.properties
    pool = context_pool(
        services.device,
        kind,
        compute_capability=(props.major, props.minor),
        green_sms=services.green_sms,
    )
    return DriverPlace(pool, kind, services.max_contexts)


class BesideServices(PrimaryServices, Protocol):
    """What :func:`check_beside_resident` uses of a backend (``CudaBackend`` has it)."""

    @property
    def context(self) -> ContextKind:
        """Where the device's resident kernels go by default."""

    def resident_kernels(self) -> Sequence[Any]:
        """The resident kernels still running on the device."""

    def launch_kernel(self, kernel: Any, grid: Any, block: Any, args: tuple[Any, ...]) -> None:
        """Launch ``kernel`` and wait for it (CuPy's current stream only)."""

    def to_host(self, device: Any) -> npt.NDArray[Any]:
        """A host copy of device memory."""


def check_beside_resident(services: BesideServices) -> str:
    """What ``pdc check`` runs beside a resident kernel: a CuPy op never used before and
    a new kernel, both in the primary context; with a kernel resident there (placement
    ``"shared"``), the new kernel refused at once (``CudaBackend.check_beside_resident``)."""
    import uuid

    token = uuid.uuid4().hex[:12]
    name = f"pdc_check_beside_{token}"
    source = (
        f'extern "C" __global__ void {name}(float* x, unsigned long long n) {{'
        "  unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;"
        "  if (i < n) x[i] += 1.0f; }"
    )
    if any(kernel.shares_primary for kernel in services.resident_kernels()):
        try:
            services.compile_kernel(source, name)
        except ResidentKernelBlocks:
            return (
                "shared placement: a new module is refused at once (ResidentKernelBlocks); "
                "CuPy's own module loads would wait for the kernel there"
            )
        raise AssertionError("a module was loaded beside a kernel in the primary context")
    import cupy

    with services.device_context():
        op = cupy.ElementwiseKernel("float32 x", "float32 y", "y = 2.0f * x", f"{name}_op")
        doubled = cupy.asnumpy(op(cupy.arange(8, dtype=cupy.float32)))
    if doubled.tolist() != [2.0 * i for i in range(8)]:
        raise AssertionError(f"the new CuPy op computed {doubled.tolist()}")
    data = services.to_device(np.zeros(64, np.float32))
    services.launch_kernel(
        services.compile_kernel(source, name), (1,), (64,), (data, np.uint64(64))
    )
    if not np.array_equal(services.to_host(data), np.ones(64, np.float32)):
        raise AssertionError("the new kernel did not add one to every element")
    return (
        f"a CuPy op never used before and a new kernel ran in the primary context "
        f"(resident kernels: context={services.context!r})"
    )
