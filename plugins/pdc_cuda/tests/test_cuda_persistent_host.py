"""Host-side logic of the resident CUDA kernel, with fake devices and streams (no GPU)."""

# ruff: noqa: E402 - pdc_cuda is imported after the skip guard above it
from __future__ import annotations

import weakref
from types import SimpleNamespace

import numpy as np
import pytest

from pdc_core import CapabilityError

pytest.importorskip("pdc_cuda", reason="pdc-cuda is not installed: pip install -e plugins/pdc_cuda")
persistent = pytest.importorskip("pdc_core._persistent")
from pdc_cuda import CudaDeviceProperties, CudaRingBody
from pdc_cuda._persistent import (
    CudaResidentKernel,
    check_device,
    region_device_address,
    ring_body,
)

from pdc_core._ring import Offset, RingLayout, RingMemory

REQUEST = np.dtype([("id", "<u8"), ("x", "<f4")], align=True)
REPLY = np.dtype([("id", "<u8"), ("y", "<f4")], align=True)
SOURCE = "__device__ int pdc_body(const pdc_request& q, pdc_reply& r) { r.id = q.id; return 0; }"
H100 = {
    "name": b"NVIDIA H100",
    "major": 9,
    "minor": 0,
    "canMapHostMemory": 1,
    "kernelExecTimeoutEnabled": 0,
    "multiProcessorCount": 132,
}


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
    properties = CudaDeviceProperties.from_dict(0, {**H100, **props})

    def require_mapped_memory(action):
        if not properties.can_map_host_memory:
            raise CapabilityError(f"cannot {action}: canMapHostMemory=False")

    return SimpleNamespace(
        properties=properties,
        qualified_name="cuda:0",
        require_mapped_memory=require_mapped_memory,
        _resident=weakref.WeakSet(),
        device_pointer=lambda array: int(array.ctypes.data),
    )


def test_capability_checks_before_launch():
    check_device(_fake_backend(), allow_watchdog=False)
    with pytest.raises(CapabilityError, match="canMapHostMemory"):
        check_device(_fake_backend(canMapHostMemory=0), allow_watchdog=False)
    with pytest.raises(CapabilityError, match=r"compute capability 6\.1; .* needs 7\.0"):
        check_device(_fake_backend(major=6, minor=1), allow_watchdog=False)
    with pytest.raises(CapabilityError, match="display watchdog"):
        check_device(_fake_backend(kernelExecTimeoutEnabled=1), allow_watchdog=False)
    check_device(_fake_backend(kernelExecTimeoutEnabled=1), allow_watchdog=True)


def test_region_address_is_the_allocation_address_plus_the_offset():
    memory = RingMemory.from_buffer(RingLayout(REQUEST, REPLY, 8))
    backend = _fake_backend()
    backend.device_pointer = lambda array: 0x7000_0000_0000  # a different device address
    offset = memory.address - memory.owner.ctypes.data
    assert region_device_address(backend, memory) == 0x7000_0000_0000 + offset


class _FakeStream:
    def __init__(self):
        self.state = "running"
        self.closed = False
        self.cupy = self

    @property
    def done(self):
        if self.state == "fault":
            raise RuntimeError("cudaErrorIllegalAddress: an illegal memory access")
        return self.state == "done"

    def close(self):
        self.closed = True


def _resident():
    memory = RingMemory.from_buffer(RingLayout(REQUEST, REPLY, 8))
    backend = _fake_backend()
    stream = _FakeStream()
    resident = CudaResidentKernel(
        backend, _kernel(), memory, None, stream, None, CudaRingBody(SOURCE)
    )
    backend._resident.add(resident)
    return resident, backend, stream


def test_exited_follows_the_stream_and_leaves_residency():
    resident, backend, stream = _resident()
    assert not resident.exited
    assert resident in backend._resident
    resident.wake()  # a polling kernel needs no doorbell
    stream.state = "done"
    assert resident.exited
    assert resident not in backend._resident
    assert resident.failure is None
    assert resident.error is None
    assert resident.read_state() is None
    resident.release()
    resident.release()
    assert stream.closed


def test_a_faulting_kernel_is_a_failure_with_the_cuda_error():
    resident, backend, stream = _resident()
    stream.state = "fault"
    assert resident.exited
    assert "cudaErrorIllegalAddress" in str(resident.failure)
    error = resident.error
    assert error is not None
    assert error.code == 0
    assert "cudaErrorIllegalAddress" in error.detail
    assert resident not in backend._resident


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
