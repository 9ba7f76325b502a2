"""Host-side logic of the resident CUDA kernel, with fake devices and streams (no GPU)."""

# ruff: noqa: E402 - pdc_cuda is imported after the skip guard above it
from __future__ import annotations

import gc

import numpy as np
import pytest

from pdc_core import CapabilityError

pytest.importorskip("pdc_cuda", reason="pdc-cuda is not installed: pip install -e plugins/pdc_cuda")
persistent = pytest.importorskip("pdc_core.backend")
from cuda_test_support import fake_backend, needs_nvrtc
from pdc_cuda import CudaRingBody
from pdc_cuda._nvrtc import min_compute_capability
from pdc_cuda._persistent import (
    CudaResidentKernel,
    check_device,
    launch_persistent_kernel,
    ring_body,
)

from pdc_core.backend import Offset, RingLayout, RingMemory, StopMode

REQUEST = np.dtype([("id", "<u8"), ("x", "<f4")], align=True)
REPLY = np.dtype([("id", "<u8"), ("y", "<f4")], align=True)
SOURCE = "__device__ int pdc_body(const pdc_request& q, pdc_reply& r) { r.id = q.id; return 0; }"


def _kernel(body=SOURCE, max_batch=None):
    kernel = persistent.PersistentKernel("echo", REQUEST, REPLY, capacity=64, max_batch=max_batch)
    kernel.add_body("cuda", body)
    return kernel


def test_a_string_body_becomes_a_device_source():
    body, options = ring_body(_kernel(), {})
    assert body.body_name == "pdc_body"
    assert body.threads == 64  # no more threads than a batch (capacity 64) can use
    assert body.max_batch == 64
    assert options == ()


def test_device_source_entry_and_options_are_used():
    source = persistent.DeviceSource(
        SOURCE.replace("pdc_body", "echo"), entry="echo", options=("-lineinfo",)
    )
    body, options = ring_body(
        _kernel(source, max_batch=5),
        {"threads": 256, "backoff_max_ns": 1024, "compile_options": ("-DX=1",)},
    )
    assert body.body_name == "echo"
    assert body.threads == 256
    assert body.max_batch == 5
    assert body.backoff_max_ns == 1024
    assert options == ("-lineinfo", "-DX=1")


def test_a_cuda_ring_body_is_taken_as_is():
    custom = CudaRingBody(SOURCE, threads=96, backoff_min_ns=0)
    body, _ = ring_body(_kernel(custom), {})
    assert (body.threads, body.backoff_min_ns) == (96, 0)


def test_unknown_options_and_bodies_are_named():
    with pytest.raises(TypeError, match="unknown CUDA launch option\\(s\\) blocks, grid"):
        ring_body(_kernel(), {"grid": 2, "blocks": 1})
    with pytest.raises(TypeError, match="must be CUDA C source"):
        ring_body(_kernel(body=object()), {})
    with pytest.raises(ValueError, match="threads must be an int"):
        ring_body(_kernel(), {"threads": 4096})
    with pytest.raises(TypeError, match="one string"):
        ring_body(_kernel(), {"compile_options": "-G"})
    kernel = persistent.PersistentKernel("cpu-only", REQUEST, REPLY)
    kernel.add_body("cpu", lambda requests: requests)
    with pytest.raises(LookupError, match="no body for the cuda backend; it has bodies for: cpu"):
        ring_body(kernel, {})


def _fake_backend(**props):
    return fake_backend(**props)


CUDA12 = (12, 8)
CUDA13 = (13, 0)


def test_capability_checks_before_launch():
    check_device(_site(_fake_backend()), allow_watchdog=False, nvrtc_version=CUDA12)
    with pytest.raises(CapabilityError, match="canMapHostMemory"):
        check_device(
            _site(_fake_backend(canMapHostMemory=0)), allow_watchdog=False, nvrtc_version=CUDA12
        )
    with pytest.raises(CapabilityError, match=r"compute capability 6\.1; .* needs 7\.0"):
        check_device(
            _site(_fake_backend(major=6, minor=1)), allow_watchdog=False, nvrtc_version=CUDA12
        )
    with pytest.raises(CapabilityError, match="display watchdog"):
        check_device(
            _site(_fake_backend(kernelExecTimeoutEnabled=1)),
            allow_watchdog=False,
            nvrtc_version=CUDA12,
        )
    check_device(
        _site(_fake_backend(kernelExecTimeoutEnabled=1)), allow_watchdog=True, nvrtc_version=CUDA12
    )


def test_the_oldest_device_follows_the_nvrtc_in_use():
    volta = _fake_backend(major=7, minor=0)
    check_device(_site(volta), allow_watchdog=False, nvrtc_version=CUDA12)
    with pytest.raises(CapabilityError) as refused:
        check_device(_site(volta), allow_watchdog=False, nvrtc_version=CUDA13)
    message = str(refused.value)
    assert "compute capability 7.0" in message
    assert "needs 7.5" in message
    assert "NVRTC 13.0 (the CUDA 13 toolkit)" in message  # the toolkit
    assert volta.qualified_name in message  # the device
    check_device(_site(_fake_backend(major=7, minor=5)), allow_watchdog=False, nvrtc_version=CUDA13)
    assert min_compute_capability(CUDA12) == (7, 0)
    assert min_compute_capability(CUDA13) == (7, 5)


def _site(backend):
    return backend.launch_site("shared")


def test_region_address_is_the_allocation_address_plus_the_offset():
    memory = RingMemory.from_buffer(RingLayout(REQUEST, REPLY, 8))
    backend = _fake_backend()
    backend.device_pointer = lambda array: 0x7000_0000_0000  # a different device address
    offset = memory.address - memory.owner.ctypes.data
    site = backend.launch_site("shared")
    assert site.place.region_address(None, memory) == 0x7000_0000_0000 + offset


class _FakeStream:
    """Stands for a CudaStream: ``done`` raises like ``query_done`` on a failed stream."""

    def __init__(self):
        self.state = "running"
        self.discarded = False

    @property
    def done(self):
        if self.state == "fault":
            raise RuntimeError("cudaErrorIllegalAddress: an illegal memory access")
        return self.state == "done"

    def discard(self):
        self.discarded = True


def _resident(backend=None):
    memory = RingMemory.from_buffer(RingLayout(REQUEST, REPLY, 8))
    backend = backend or _fake_backend()
    stream = _FakeStream()
    site = backend.launch_site("shared")
    resident = CudaResidentKernel(
        backend,
        _kernel(),
        memory,
        None,
        stream,
        None,
        CudaRingBody(SOURCE),
        place=site.place,
        residency=backend.residency,
    )
    backend.residency.register(resident)
    return resident, backend, stream


def test_exited_follows_the_stream_and_leaves_residency():
    resident, backend, stream = _resident()
    assert not resident.exited
    assert backend.resident_kernels() == [resident]
    resident.wake()  # a polling kernel needs no doorbell
    stream.state = "done"
    assert resident.exited
    assert backend.resident_kernels() == []
    assert resident.failure is None
    assert resident.error is None
    assert resident.read_state() is None
    resident.release()
    resident.release()
    assert stream.discarded  # never synchronized: it is done, or failed


def test_a_dropped_kernel_stays_referenced_until_its_stream_is_done():
    backend = _fake_backend()
    resident, _, stream = _resident(backend)
    del resident
    gc.collect()
    (kept,) = backend.resident_kernels()  # a strong reference: its rings stay mapped
    stream.state = "done"
    assert backend.resident_kernels() == []
    assert kept.exited


def test_memory_of_a_stopped_kernel_is_freed_only_once_none_is_resident():
    backend = _fake_backend()
    first, _, first_stream = _resident(backend)
    second, _, second_stream = _resident(backend)
    first_stream.state = "done"
    assert first.exited
    first.release()
    # cudaFreeHost may wait for the whole device: the rings wait for the other kernel.
    assert len(backend.residency._deferred) == 1
    allocation = first.memory.owner
    assert backend.residency._deferred[0][0] is allocation  # the allocation, not its views
    first.memory.detach()  # what the session does next: its views let go of the allocation
    assert backend.residency._deferred[0][0] is allocation
    second_stream.state = "done"
    assert backend.resident_kernels() == []
    assert len(backend.residency._deferred) == 1  # a query only looks
    second.release()  # the last one goes: collect() lets the memory go
    assert backend.residency._deferred == []


def test_a_faulting_kernel_is_a_failure_with_the_cuda_error():
    resident, backend, stream = _resident()
    stream.state = "fault"
    assert resident.exited
    assert "cudaErrorIllegalAddress" in str(resident.failure)
    error = resident.error
    assert error is not None
    assert error.code == 0
    assert "cudaErrorIllegalAddress" in error.detail
    assert backend.resident_kernels() == []
    resident.release()
    assert stream.discarded


def test_the_error_word_wins_over_the_failure():
    resident, _, _ = _resident()
    memory = resident.memory
    message = b"the kernel body returned an error for request #3"
    memory.error_message_bytes[: len(message)] = np.frombuffer(message, np.uint8)
    memory.words32[Offset.ERROR_LENGTH // 4] = len(message)
    memory.words32[Offset.ERROR_CODE // 4] = 300  # a body-defined code
    error = resident.error
    assert error.code == 300
    assert error.detail == message.decode()


class _LaunchStream:
    def __init__(self):
        self.calls = []

    def synchronize(self):
        self.calls.append("synchronize")

    def discard(self):
        self.calls.append("discard")


class _FailingKernel:
    max_threads_per_block = 1024

    def launch(self, grid, block, args, *, stream=None):
        raise KeyboardInterrupt  # interrupted around the launch


@needs_nvrtc()  # launch_persistent_kernel renders and compiles the source first
def test_a_failed_launch_leaves_a_stop_word_and_nothing_resident(monkeypatch):
    backend = _fake_backend()
    stream = _LaunchStream()
    monkeypatch.setattr(backend, "compile_kernel", lambda *args: _FailingKernel())
    monkeypatch.setattr(backend, "create_stream", lambda: stream)
    memory = RingMemory.from_buffer(RingLayout(REQUEST, REPLY, 8))
    with pytest.raises(KeyboardInterrupt):
        launch_persistent_kernel(backend.launch_site("shared"), _kernel(), memory)
    assert memory.load32(Offset.STOP) == StopMode.NOW  # a kernel that did start exits
    assert stream.calls == ["synchronize", "discard"]  # the rings outlive it
    assert backend.resident_kernels() == []


# -- launch options: typed, checked before anything is allocated -------------------------


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"thread": 64}, TypeError, r"unknown CUDA launch option\(s\) thread; the cuda backend"),
        ({"threads": True}, TypeError, "threads must be an int in 1..1024, got bool True"),
        ({"threads": 64.0}, TypeError, "threads must be an int in 1..1024, got float 64.0"),
        ({"threads": 0}, ValueError, "threads must be an int in 1..1024, not 0"),
        ({"backoff_min_ns": "64"}, TypeError, "backoff_min_ns must be an int in 0..1000000 ns"),
        ({"allow_watchdog": 1}, TypeError, "allow_watchdog must be True or False, got int 1"),
        ({"compile_options": "-G"}, TypeError, "not one string"),
        ({"compile_options": ["-G", 3]}, TypeError, "compile_options must be strings, got 3"),
        ({"context": "mine"}, ValueError, "context='mine' is not a placement"),
    ],
)
def test_launch_options_are_typed_and_named_when_wrong(options, error, match):
    from pdc_cuda._persistent import LaunchOptions

    with pytest.raises(error, match=match):
        LaunchOptions.parse(options)


def test_launch_options_parse_into_their_types():
    from pdc_cuda._persistent import LaunchOptions

    parsed = LaunchOptions.parse(
        {"threads": np.int16(96), "compile_options": ["-lineinfo"], "context": "green"}
    )
    assert parsed == LaunchOptions(threads=96, compile_options=("-lineinfo",), context="green")
    assert type(parsed.threads) is int
    assert LaunchOptions.parse(parsed) is parsed
    assert parsed.overrides() == {"threads": 96}


@pytest.mark.anyio
@pytest.mark.parametrize("pipeline", [False, True], ids=["kernel", "pipeline"])
async def test_a_misspelt_launch_option_is_refused_before_any_ring_is_made(pipeline):
    """``open_persistent_kernel(..., thread=64)`` (and a pipeline's): a TypeError naming
    the option, and the backend allocated nothing -- the core asks the backend's
    ``check_launch_options`` before it allocates the rings."""
    from pdc_cuda.testing import HostCudaBackend

    from pdc_core import PersistentPipeline, open_persistent_kernel, open_persistent_pipeline

    backend = HostCudaBackend()
    allocations: list[object] = []
    allocate = backend.allocate

    def counting(*args, **kwargs):
        allocations.append(args)
        return allocate(*args, **kwargs)

    backend.allocate = counting
    if pipeline:
        stages = [
            persistent.PersistentKernel(name, REQUEST, REQUEST, capacity=8).add_body(
                "cuda", SOURCE.replace("r.id = q.id;", "r = q;")
            )
            for name in ("a", "b")
        ]
        opened = open_persistent_pipeline(PersistentPipeline(*stages), backend, thread=64)
    else:
        opened = open_persistent_kernel(_kernel(), backend, thread=64)
    with pytest.raises(TypeError, match=r"unknown CUDA launch option\(s\) thread"):
        async with opened:
            pytest.fail("launched")
    assert allocations == []
    assert backend.resident_kernels() == []
