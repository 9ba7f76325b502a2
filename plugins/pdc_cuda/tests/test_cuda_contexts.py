"""Resident kernels in a context pdc owns, against a fake driver (no GPU): which calls go
to which context, what may not cross, the shared placement's refusals, ring memory
allocated portable."""

from __future__ import annotations

import sys
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

pytest.importorskip("pdc_cuda", reason="pdc-cuda is not installed: pip install -e plugins/pdc_cuda")
from context_fakes import FakeDriver, FakeDriverError, fake_compiler
from cuda_pipeline_support import abc
from cuda_test_support import fake_backend, needs_nvrtc
from pdc_cuda import _memory, _numa
from pdc_cuda._context import ContextPool, CudaContextError, PdcContext
from pdc_cuda._persistent import LaunchOptions, launch_persistent_kernel
from pdc_cuda._pipeline import launch_pipeline
from pdc_cuda._places import CONTEXT_ENV, DriverPlace, check_state, context_kind
from pdc_cuda._residency import BESIDE_RESIDENT, ResidentKernelBlocks, Why
from pdc_cuda.testing import HostCudaBackend

import pdc_core
from pdc_core import CapabilityError, PersistentKernel
from pdc_core.backend import RingLayout, RingMemory

REQUEST = np.dtype([("id", "<u8"), ("x", "<f4")], align=True)
REPLY = np.dtype([("id", "<u8"), ("y", "<f4")], align=True)
SOURCE = "__device__ int pdc_body(const pdc_request& q, pdc_reply& r) { r.id = q.id; return 0; }"
OTHER = SOURCE.replace("r.id = q.id;", "r.id = q.id + 1;")
KEY = ("src", "k", ("-std=c++17",))


def _pool(driver: FakeDriver, kind: Any = "own") -> ContextPool:
    return ContextPool(
        lambda: PdcContext(driver, 0, kind, compute_capability=(9, 0), compiler=fake_compiler)
    )


def _kernel(body: str = SOURCE, state: Any = None, name: str = "echo") -> PersistentKernel:
    kernel = PersistentKernel(name, REQUEST, REPLY, capacity=64, state=state)
    kernel.add_body("cuda", body)
    return kernel


class _Setup:
    """A host-build backend whose resident kernels go to a fake driver's contexts."""

    def __init__(self, kind: Any = "own") -> None:
        self.driver = FakeDriver()
        self.pool = _pool(self.driver, kind)
        self.backend = HostCudaBackend(resident_place=DriverPlace(self.pool, kind))

    def rings(self, *, portable: bool = True) -> RingMemory:
        rings = RingMemory.allocate(self.backend, RingLayout(REQUEST, REPLY, 8))
        owner = rings.owner if isinstance(rings.owner, np.ndarray) else rings.base
        self.driver.register_host(int(owner.ctypes.data), portable=portable, owner="primary")
        return rings

    def launch(self, kernel: PersistentKernel | None = None, **options: Any) -> Any:
        site = self.backend.launch_site()
        launch = LaunchOptions.parse(options)
        return launch_persistent_kernel(site, kernel or _kernel(), self.rings(), launch)


# -- the setting ---------------------------------------------------------------------------


def test_the_placement_defaults_to_a_context_of_its_own_and_can_be_set(monkeypatch):
    monkeypatch.delenv(CONTEXT_ENV, raising=False)
    assert context_kind() == "own"
    assert context_kind("shared") == "shared"
    monkeypatch.setenv(CONTEXT_ENV, "green")
    assert context_kind() == "green"
    assert context_kind("own") == "own"  # the call wins over the environment
    monkeypatch.setenv(CONTEXT_ENV, "mine")
    with pytest.raises(ValueError, match=r"PDC_CUDA_CONTEXT='mine' .*'own', 'green', 'shared'"):
        context_kind()
    with pytest.raises(ValueError, match=r"context='primary' is not a placement"):
        HostCudaBackend(context="primary")


def test_the_placement_policy_lives_in_the_places_layer_and_goes_straight_down():
    """``_context`` knows contexts only: the kinds, their default, the environment
    variable and ``"shared"`` are the places layer's; ``place_for`` turns a kind into a
    place -- the primary context's services, or a pool of contexts pdc owns (bounded by
    the device's ``max_contexts``) -- and reaches ``_context`` once, for the pool."""
    import inspect

    from pdc_cuda import _context
    from pdc_cuda._places import PrimaryPlace, place_for

    source = inspect.getsource(_context)
    for policy in ('PDC_CUDA_CONTEXT"', "os.environ", "CONTEXT_KINDS", "DEFAULT_CONTEXT"):
        assert policy not in source
    services = SimpleNamespace(
        device=7,
        properties=SimpleNamespace(major=9, minor=0),
        green_sms=16,
        max_contexts=3,
    )
    shared = place_for("shared", services)
    assert isinstance(shared, PrimaryPlace)
    assert shared.services is services
    assert shared.shares_primary
    for kind in ("own", "green"):
        place = place_for(kind, services)
        assert isinstance(place, DriverPlace)
        assert (place.kind, place.max_contexts) == (kind, 3)
        assert place.pool is place_for(kind, services).pool  # one pool per device and kind
        assert not place.shares_primary


def test_nothing_reaches_the_driver_until_a_context_is_used():
    driver = FakeDriver()
    pool = _pool(driver)
    assert driver.log == []
    context = pool.context_for([KEY])
    assert not context.created
    assert driver.log == []
    context.load_source(*KEY)
    assert [entry[0] for entry in driver.log] == ["create_context", "load_module", "get_function"]


# -- which calls go to which context -------------------------------------------------------


@needs_nvrtc()  # the launch checks the device against the NVRTC in use
def test_a_resident_launch_goes_to_the_context_pdc_owns_and_the_thread_keeps_its_own():
    setup = _Setup()
    state = np.arange(4, dtype=np.int64)
    resident = setup.launch(_kernel(state=state))
    driver = setup.driver
    (context,) = driver.contexts
    assert driver.stack == []  # every call restored the primary context
    work = [entry for entry in driver.log if entry[0] not in ("create_context",)]
    assert {entry[1] for entry in work} == {context}, work  # nothing in the primary one
    names = [entry[0] for entry in work]
    assert names.index("load_module") < names.index("launch")
    (launch,) = driver.calls("launch")
    _name, grid, block, args = launch[2]
    assert (grid, block) == ((1, 1, 1), (64, 1, 1))
    region = resident.memory.address
    assert args[:2] == (region, region)  # the mapped rings, at the same (portable) address
    assert args[2] == resident.state_array.address  # state in the kernel's own context
    assert driver.memory[args[2]].view(np.int64).tolist() == [0, 1, 2, 3]
    assert setup.backend.resident_kernels() == [resident]
    assert resident.shares_primary is False
    # read_state: a side stream of the kernel's context, never the kernel's stream.
    assert resident.read_state().tolist() == [0, 1, 2, 3]
    driver.finish(resident.stream)
    assert resident.exited
    resident.release()
    (free,) = driver.calls("mem_free")
    assert free[1] is context
    assert free[2] == args[2]
    assert driver.calls("free while busy") == []
    assert driver.calls("load while busy") == []


@needs_nvrtc()
def test_a_second_kernel_never_loads_into_a_context_where_one_runs():
    setup = _Setup()
    driver = setup.driver
    first = setup.launch()
    same = setup.launch()  # the same source: loaded already, shares the context
    assert same.compiled is first.compiled
    other = setup.launch(_kernel(OTHER, name="other"))  # a new module: another context
    assert len(driver.contexts) == 2
    assert other.compiled.context is not first.compiled.context
    assert driver.calls("load while busy") == []
    for resident in (first, same, other):
        driver.finish(resident.stream)
    assert setup.backend.resident_kernels() == []
    # Once nothing runs there, the first context takes new modules again.
    third = setup.launch(_kernel(OTHER.replace("+ 1", "+ 2"), name="third"))
    assert third.compiled.context is first.compiled.context
    assert len(driver.contexts) == 2


def test_memory_of_a_busy_context_is_freed_once_nothing_runs_there():
    driver = FakeDriver()
    context = _pool(driver).context_for([KEY])
    kernel = context.load_source(*KEY)
    scratch = context.allocate(16)
    stream = context.create_stream()
    kernel.launch((1,), (32,), (np.uint64(1),), stream=stream)
    assert context.busy
    scratch.free()
    assert driver.calls("mem_free") == []  # cuMemFree would wait for the kernel
    with pytest.raises(CudaContextError, match="would wait for that kernel"):
        context.load_source("new", "k", ())
    driver.finish(stream)
    assert not context.busy
    assert driver.calls("mem_free") == []  # busy only looks: collect() frees
    assert not context.collect()
    assert [entry[2] for entry in driver.calls("mem_free")] == [scratch.address]
    assert driver.calls("free while busy") == []
    assert not context.collect()  # once
    assert len(driver.calls("mem_free")) == 1


def test_busy_is_a_pure_query_and_collect_keeps_what_still_runs():
    driver = FakeDriver()
    context = _pool(driver).context_for([KEY])
    kernel = context.load_source(*KEY)
    first, second = context.create_stream(), context.create_stream()
    kernel.launch((1,), (32,), (np.uint64(1),), stream=first)
    kernel.launch((1,), (32,), (np.uint64(1),), stream=second)
    scratch = context.allocate(16)
    scratch.free()  # deferred: kernels run here
    driver.finish(first)
    for _ in range(3):
        assert context.busy
    assert context.collect()  # the second still runs: nothing freed
    assert driver.calls("mem_free") == []
    driver.finish(second)
    assert not context.collect()
    assert [entry[2] for entry in driver.calls("mem_free")] == [scratch.address]


def test_the_pool_makes_at_most_max_contexts_and_says_what_to_do():
    driver = FakeDriver()
    setup = _Setup()
    setup.driver = driver
    setup.pool = _pool(driver)
    setup.backend = HostCudaBackend(resident_place=DriverPlace(setup.pool, "own", 2))
    first = setup.launch()
    second = setup.launch(_kernel(OTHER, name="other"))
    assert len(driver.contexts) == 2
    third = _kernel(OTHER.replace("+ 1", "+ 2"), name="third")
    refused = (
        r"every one of the 2 context\(s\) pdc may own \(own on cuda:0\) runs a resident "
        r"kernel.*preload_persistent_kernels.*CudaBackend\(max_contexts=3\)"
    )
    with pytest.raises(CudaContextError, match=refused):
        setup.launch(third)
    assert len(driver.contexts) == 2  # none made
    assert driver.calls("load while busy") == []
    driver.finish(second.stream)
    assert setup.launch(third).compiled.context is second.compiled.context
    driver.finish(first.stream)


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"max_contexts": 0}, ValueError, "max_contexts must be at least 1, not 0"),
        ({"max_contexts": True}, TypeError, "max_contexts must be an int, got bool True"),
        ({"max_contexts": 2.0}, TypeError, "max_contexts must be an int, got float 2.0"),
        ({"green_sms": 0}, ValueError, "green_sms must be at least 1, not 0"),
        ({"green_sms": "8"}, TypeError, "green_sms must be a number of SMs"),
    ],
)
def test_the_context_settings_are_checked_first(options, error, match):
    from pdc_cuda import CudaBackend

    with pytest.raises(error, match=match):
        CudaBackend(**options)


def test_residency_running_only_looks_and_collect_lets_memory_go():
    from pdc_cuda._residency import Residency

    class Kernel:
        exited = False
        shares_primary = False
        label = "'k'"

    residency = Residency("cuda:0")
    kernel = Kernel()
    residency.register(kernel)
    held = np.zeros(4)
    residency.defer_free(held)
    kernel.exited = True
    assert residency.running() == []
    assert residency._deferred == [held]  # a query frees nothing
    assert residency.collect() == []
    assert residency._deferred == []
    freed: list[str] = []
    residency.register(Kernel())  # resident again: memory of a context pdc owns goes to it
    residency.defer_free(SimpleNamespace(free=lambda: freed.append("its context's free")))
    assert freed == ["its context's free"]
    assert residency._deferred == []


def test_a_green_context_gets_its_partition_and_its_streams():
    driver = FakeDriver()
    context = ContextPool(
        lambda: PdcContext(driver, 0, "green", green_sms=5, compiler=fake_compiler)
    ).context_for([KEY])
    context.create_stream()
    assert driver.calls("create_green_context")[0][2] == (0, 5)
    assert context.sm_count == 8  # rounded up by the driver
    assert driver.calls("create_stream")[0][2] is True  # a stream of the green context
    assert "8 SMs" in repr(context)


class _Resident:
    """A kernel resident in some context (``partition``: its SMs, None outside one)."""

    exited = False

    def __init__(self, partition: int | None) -> None:
        self.partition = partition


@needs_nvrtc()
def test_a_pipeline_in_a_green_context_must_fit_its_partition_not_the_device():
    setup = _Setup("green")
    driver = setup.driver
    site = setup.backend.launch_site()
    assert site.properties.multiprocessor_count > 8  # the device alone would hold it
    single = setup.launch()  # one resident kernel in the partition (8 SMs, rounded up)
    assert single.partition == 8
    pipeline = abc()
    for _ in range(6):  # 6 + 1 resident: a 3-stage pipeline does not fit in 8 SMs
        setup.backend.residency.register(_Resident(partition=8))
    with pytest.raises(CapabilityError) as refused:
        launch_pipeline(site, pipeline, RingMemory.from_buffer(pipeline.kernel.layout))
    message = str(refused.value)
    assert "partition of 8 SMs holds at most 8 resident kernels and 7 are resident" in message
    assert "green_sms" in message
    assert driver.calls("launch") == driver.calls("launch")[:1]  # only the single kernel
    # Kernels outside a partition (another context) leave the partition's room alone.
    driver.finish(single.stream)
    setup.backend.residency.register(_Resident(partition=None))
    assert setup.backend.resident_kernels()  # still resident: but not in the partition
    with pytest.raises(CapabilityError, match="and 6 are resident there"):
        launch_pipeline(site, pipeline, RingMemory.from_buffer(pipeline.kernel.layout))


# -- what may not cross --------------------------------------------------------------------


@needs_nvrtc()
def test_ring_memory_that_is_not_portable_is_refused_with_the_reason():
    setup = _Setup()
    site = setup.backend.launch_site()
    rings = setup.rings(portable=False)
    with pytest.raises(CudaContextError, match=r"allocated mapped and portable \(MemoryKind"):
        launch_persistent_kernel(site, _kernel(), rings)
    assert setup.driver.calls("launch") == []
    assert setup.backend.resident_kernels() == []


def test_device_memory_of_the_primary_context_does_not_cross():
    driver = FakeDriver()
    context = _pool(driver).context_for([KEY])
    kernel = context.load_source(*KEY)
    stream = context.create_stream()
    primary_array = SimpleNamespace(__cuda_array_interface__={"data": (0x1000, False)})
    with pytest.raises(CudaContextError, match="device memory of the primary context"):
        kernel.launch((1,), (32,), (primary_array,), stream=stream)
    foreign = _pool(FakeDriver()).context_for([KEY]).allocate(8)
    with pytest.raises(CudaContextError, match="argument 0 is device memory of"):
        kernel.launch((1,), (32,), (foreign,), stream=stream)
    with pytest.raises(CudaContextError, match="context='shared'"):
        check_state(primary_array, "placement 'own'")
    assert driver.calls("launch") == []


# -- the shared placement refuses what would wait ------------------------------------------


class _SharedResident:
    """Stands for a kernel resident in the primary context."""

    exited = False
    shares_primary = True
    label = "'counter'"
    stream = None


def test_the_shared_placement_refuses_what_would_wait_for_a_resident_kernel():
    backend = HostCudaBackend(context="shared")
    assert backend.context == "shared"
    backend.residency.register(_SharedResident())
    with pytest.raises(ResidentKernelBlocks) as refused:
        backend.free_cached_memory()
    message = str(refused.value)
    assert "'counter'" in message
    assert "context='own'" in message
    with pytest.raises(ResidentKernelBlocks, match=r"compile and load kernel 'pdc_ring_kernel'"):
        backend.compile_kernel(SOURCE, "pdc_ring_kernel")
    assert isinstance(refused.value, pdc_core.BackendError)


def test_pdc_check_beside_a_kernel_in_the_primary_context_reports_the_refusal():
    """What ``pdc check`` runs beside its resident kernel: in the shared placement, the
    new kernel is refused at once (and CuPy's op, whose load would wait, is not tried)."""
    backend = fake_backend()
    backend.residency.register(_SharedResident())
    report = backend.check_beside_resident()
    assert report.startswith("shared placement: a new module is refused at once")


def test_a_kernel_in_a_context_of_its_own_blocks_nothing_in_the_primary_one():
    backend = HostCudaBackend()
    assert backend.context == "own"
    resident = _SharedResident()
    resident.shares_primary = False
    backend.residency.register(resident)
    backend.free_cached_memory()  # no refusal: another context


@needs_nvrtc()
def test_a_cached_module_is_no_load_and_is_allowed_in_the_shared_placement():
    from pdc_cuda.testing._build import compiler_missing

    if compiler_missing():
        pytest.skip(f"no host compiler: {compiler_missing()}")
    from pdc_cuda._persistent import render_kernel
    from pdc_cuda._ring_source import KERNEL_NAME, RingWiring

    backend = HostCudaBackend(context="shared")
    _, source, options = render_kernel(_kernel(), {}, RingWiring())
    compiled = backend.compile_kernel(source, KERNEL_NAME, options)
    backend.residency.register(_SharedResident())
    assert backend.compile_kernel(source, KERNEL_NAME, options) is compiled


# -- the list of driver calls beside a resident kernel -------------------------------------


@pytest.mark.parametrize("call", BESIDE_RESIDENT, ids=lambda call: call.where)
def test_every_listed_driver_call_names_a_function_that_exists(call):
    module_name, _, qualified = call.where.partition(":")
    target: Any = __import__(module_name, fromlist=["_"])
    for part in qualified.split("."):
        target = getattr(target, part)
    assert callable(target) or isinstance(target, property)
    assert call.why[0] is not Why.REFUSED_SHARED  # the default placement refuses nothing


# -- ring memory is portable ---------------------------------------------------------------


def test_mapped_memory_is_allocated_portable(monkeypatch):
    flags: list[int] = []

    class Runtime:
        hostAllocPortable = 1
        hostAllocMapped = 2
        CUDARuntimeError = FakeDriverError

        @staticmethod
        def getDevice() -> int:
            return 0

    class PinnedMemory:
        def __init__(self, nbytes: int, flag: int) -> None:
            flags.append(flag)
            self.buffer = bytearray(nbytes)

    cuda = SimpleNamespace(
        runtime=Runtime,
        PinnedMemory=PinnedMemory,
        PinnedMemoryPointer=lambda memory, offset: memory.buffer,
    )
    monkeypatch.setitem(sys.modules, "cupy", SimpleNamespace(cuda=cuda))
    monkeypatch.setattr(_memory, "host_memory_placement", lambda device: SimpleNamespace(node=None))
    assert _numa is not None
    ring = _memory.mapped_empty((64,), np.dtype(np.uint8))
    assert ring.nbytes == 64
    assert flags == [Runtime.hostAllocMapped | Runtime.hostAllocPortable]


@needs_nvrtc()
def test_the_resident_kernel_compiles_to_a_cubin_its_context_loads_as_it_is():
    from pdc_cuda._context import nvrtc_compiler
    from pdc_cuda._kernels import compile_options
    from pdc_cuda._persistent import render_kernel
    from pdc_cuda._ring_source import RingWiring

    _, source, options = render_kernel(_kernel(), {}, RingWiring())
    image = nvrtc_compiler(source, compile_options(options), "sm_90")
    assert image[:4] == b"\x7fELF"  # machine code: no PTX JIT, whatever the driver's PTX


@needs_nvrtc()
def test_kernels_preloaded_together_share_one_context_when_launched_one_by_one():
    setup = _Setup()
    kernels = [_kernel(), _kernel(OTHER, name="other")]
    setup.backend.preload_persistent_kernels(kernels)
    assert len(setup.driver.calls("load_module")) == 2
    first = setup.launch(kernels[0])
    second = setup.launch(kernels[1])  # loaded already: no load beside the first
    assert first.compiled.context is second.compiled.context
    assert len(setup.driver.contexts) == 1
    assert len(setup.driver.calls("load_module")) == 2
    assert setup.driver.calls("load while busy") == []


# -- the real driver's calls, against a stand-in cuda.bindings.driver ----------------------


class _FakeBindings:
    """``cuda.bindings.driver`` as far as :class:`BindingsDriver` uses it: every function
    records its name and returns ``(CUresult, values...)``; ``fail`` names one that
    returns an error status; ``ctx_create_params`` picks cuCtxCreate's form (13: three
    arguments, 12: two)."""

    class CUresult:
        CUDA_ERROR_NOT_READY = 600

    class CUdevResourceType:
        CU_DEV_RESOURCE_TYPE_SM = 1

    class CUgreenCtxCreate_flags:
        CU_GREEN_CTX_DEFAULT_STREAM = 1

    class CUstream_flags:
        CU_STREAM_NON_BLOCKING = 1

    class CUfunction_attribute:
        CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0

    def __init__(self, *, ctx_create_params: bool = True, fail: str = "") -> None:
        self.calls: list[str] = []
        self.fail = fail
        part = SimpleNamespace(sm=SimpleNamespace(smCount=8))
        values: dict[str, tuple[Any, ...]] = {
            "cuDeviceGet": ("dev",),
            "cuCtxCreate": ("ctx",),
            "cuDeviceGetDevResource": ("whole",),
            "cuDevSmResourceSplitByCount": ([part], 1, "rest"),
            "cuDevResourceGenerateDesc": ("desc",),
            "cuGreenCtxCreate": ("green",),
            "cuCtxFromGreenCtx": ("green-ctx",),
            "cuModuleLoadData": ("module",),
            "cuModuleGetFunction": ("function",),
            "cuFuncGetAttribute": (1024,),
            "cuGreenCtxStreamCreate": ("green-stream",),
            "cuStreamCreate": ("stream",),
            "cuMemAlloc": (0x1000,),
            "cuMemHostGetDevicePointer": (0x2000,),
        }
        self._values = values
        self._ctx_params = ctx_create_params

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("cu"):
            raise AttributeError(name)
        if name == "cuGetErrorName":
            return lambda status: (0, b"CUDA_ERROR_INVALID_VALUE")

        def call(*args: Any) -> tuple[Any, ...]:
            if name == "cuCtxCreate" and len(args) != (3 if self._ctx_params else 2):
                raise TypeError(f"cuCtxCreate() takes {3 if self._ctx_params else 2} arguments")
            self.calls.append(name)
            status = 1 if name == self.fail else 0
            return (status, *self._values.get(name, ()))

        return call


def _bindings_driver(monkeypatch: Any, fake: _FakeBindings) -> Any:
    from pdc_cuda._context import BindingsDriver

    real_import = __import__("importlib").import_module
    monkeypatch.setattr(
        "pdc_cuda._context.importlib.import_module",
        lambda name: fake if name == "cuda.bindings.driver" else real_import(name),
    )
    return BindingsDriver()


@pytest.mark.parametrize("ctx_create_params", [True, False], ids=["cuda-bindings 13", "12"])
def test_the_bindings_driver_makes_every_call_through_one_place(monkeypatch, ctx_create_params):
    fake = _FakeBindings(ctx_create_params=ctx_create_params)
    driver = _bindings_driver(monkeypatch, fake)
    assert driver.create_context(0) == "ctx"
    assert driver.create_green_context(0, 8) == ("green", "green-ctx", 8)
    driver.push("ctx")
    assert driver.load_module(b"image") == "module"
    assert driver.get_function("module", "k") == "function"
    assert driver.max_threads_per_block("function") == 1024
    assert driver.create_stream(None) == "stream"
    assert driver.create_stream("green") == "green-stream"
    assert driver.stream_done("stream")
    assert driver.mem_alloc(16) == 0x1000
    assert driver.host_device_pointer(0x10) == 0x2000
    driver.copy_to_device(1, 2, 3, "stream")
    driver.copy_to_host(1, 2, 3, "stream")
    driver.launch("function", (1, 1, 1), (32, 1, 1), [1, 2], "stream")
    driver.stream_synchronize("stream")
    driver.destroy_stream("stream")
    driver.mem_free(0x1000)
    driver.pop()
    driver.destroy_context("ctx", None)
    driver.destroy_context("green-ctx", "green")
    assert fake.calls[:4] == ["cuInit", "cuDeviceGet", "cuCtxCreate", "cuCtxPopCurrent"]
    assert {"cuFuncLoad", "cuLaunchKernel", "cuGreenCtxDestroy", "cuCtxDestroy"} <= set(fake.calls)


def test_a_failed_driver_call_is_named_with_its_status(monkeypatch):
    driver = _bindings_driver(monkeypatch, _FakeBindings(fail="cuMemAlloc"))
    with pytest.raises(
        CudaContextError, match=r"^cuMemAlloc failed: CUDA_ERROR_INVALID_VALUE \(1\)$"
    ):
        driver.mem_alloc(16)


def test_every_call_of_the_bindings_driver_exists_in_cuda_bindings():
    """A misspelt call would fail only on a GPU: each name the driver passes to ``_call``
    is a function of the installed ``cuda.bindings.driver`` (12 or 13)."""
    import inspect
    import re

    from pdc_cuda._context import BindingsDriver

    module = pytest.importorskip("cuda.bindings.driver", reason="cuda-bindings is not installed")
    source = inspect.getsource(BindingsDriver)
    names = set(re.findall(r'_call\("(cu\w+)"', source)) | set(re.findall(r"_cu\.(cu\w+)", source))
    assert len(names) >= 25
    missing = sorted(name for name in names if not callable(getattr(module, name, None)))
    assert not missing, missing
