"""NUMA-local mapped host memory: discovery and policy on fake sysfs trees, the allocation
up to the CUDA call on this machine's real node, the fallback with a fake CuPy, and (marked
``cuda``) rings in that memory on a GPU.

Without a GPU the allocation is real up to ``cudaHostRegister``: pages are mapped, given
the node's policy with ``mbind`` and touched, and ``move_pages`` is asked where they lie;
the registration is a recording fake. The GPU tests check that the memory works as a
ring and, where sysfs names a node, that it lies there.
"""

from __future__ import annotations

import ctypes
import gc
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("pdc_cuda", reason="pdc-cuda is not installed: pip install -e plugins/pdc_cuda")
from cuda_test_support import DOUBLE, H100_PROPERTIES, REPLY, REQUEST, requires_gpu
from pdc_cuda import CudaDeviceProperties, _memory, _numa
from pdc_cuda._numa import (
    NumaPlacement,
    allocate_on_node,
    choose_placement,
    page_nodes,
    parse_node_list,
    placement_for_bus_id,
    read_numa_node,
    read_online_nodes,
    sysfs_bus_id,
)

from pdc_core.backend import MemoryKind

BUS = "0000:19:00.0"

linux_numa = pytest.mark.skipif(
    sys.platform != "linux" or read_online_nodes() is None,
    reason="needs Linux with NUMA support (/sys/devices/system/node/online)",
)


def fake_sysfs(root: Path, numa_node: str | None, online: str | None = "0-1") -> Path:
    """A sysfs tree with the GPU ``BUS`` (its ``numa_node``, if any) and the online nodes."""
    device = root / "bus" / "pci" / "devices" / BUS
    device.mkdir(parents=True)
    if numa_node is not None:
        (device / "numa_node").write_text(numa_node + "\n")
    if online is not None:
        nodes = root / "devices" / "system" / "node"
        nodes.mkdir(parents=True)
        (nodes / "online").write_text(online + "\n")
    return root


def a_local_node() -> int:
    online = read_online_nodes()
    assert online
    return online[0]


# -- discovery and policy ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cuda_id", "sysfs_id"),
    [
        ("0000:3B:00.0", "0000:3b:00.0"),
        ("00000000:3B:00.0", "0000:3b:00.0"),  # nvidia-smi's 8-digit domain
        ("10000:01:00.0", "10000:01:00.0"),  # a VMD domain keeps its digits
        (" 0000:19:00.0\n", "0000:19:00.0"),
    ],
)
def test_bus_ids_are_spelled_as_sysfs_does(cuda_id, sysfs_id):
    assert sysfs_bus_id(cuda_id) == sysfs_id


def test_a_bad_bus_id_is_named():
    with pytest.raises(ValueError, match="'GPU-1234' is not a PCI bus id"):
        sysfs_bus_id("GPU-1234")


def test_node_lists():
    assert parse_node_list("0\n") == (0,)
    assert parse_node_list("0-3,5,7-8") == (0, 1, 2, 3, 5, 7, 8)
    assert parse_node_list("") == ()


def test_the_node_sysfs_gives(tmp_path):
    assert read_numa_node(BUS, fake_sysfs(tmp_path / "a", "1")) == (
        1,
        str(tmp_path / "a" / "bus/pci/devices" / BUS / "numa_node"),
    )
    node, why = read_numa_node(BUS, fake_sysfs(tmp_path / "b", "-1"))
    assert node is None
    assert "is -1: the platform names no node close to the GPU" in why
    node, why = read_numa_node(BUS, fake_sysfs(tmp_path / "c", None))
    assert node is None
    assert "cannot be read" in why
    node, why = read_numa_node(BUS, fake_sysfs(tmp_path / "d", "one"))
    assert node is None
    assert "holds 'one', not a node number" in why
    assert read_online_nodes(fake_sysfs(tmp_path / "e", "0", online="0-1,3")) == (0, 1, 3)
    assert read_online_nodes(fake_sysfs(tmp_path / "f", "0", online=None)) is None


def test_the_policy():
    assert choose_placement(None, "numa_node is -1", (0, 1)) == NumaPlacement(
        None, "numa_node is -1"
    )
    assert choose_placement(1, "src", (0, 1)) == NumaPlacement(1, "the GPU's node, from src")
    assert choose_placement(1, "src", None).node == 1  # the kernel lists no nodes: try it
    single = choose_placement(0, "src", (0,))
    assert single.node is None
    assert "one NUMA node online (0): all host memory is local" in single.reason
    offline = choose_placement(2, "src", (0, 1))
    assert offline.node is None
    assert "names node 2, which is not online (0,1)" in offline.reason
    assert NumaPlacement(1, "why").describe() == "NUMA node 1 (why)"
    assert NumaPlacement(None, "why").describe() == "no NUMA placement (why)"


def test_placement_for_a_bus_id(tmp_path):
    probed: list[int] = []
    placed = placement_for_bus_id(BUS, fake_sysfs(tmp_path / "a", "1"), probe=probed.append)
    assert placed.node == 1
    assert probed == [1]

    def refused(node: int) -> None:
        raise PermissionError(1, "mbind(MPOL_PREFERRED, node 1) failed: Operation not permitted")

    placed = placement_for_bus_id(BUS, fake_sysfs(tmp_path / "b", "1"), probe=refused)
    assert placed.node is None
    assert "node 1 named by" in placed.reason
    assert "Operation not permitted" in placed.reason
    none = placement_for_bus_id(BUS, fake_sysfs(tmp_path / "c", "-1"), probe=refused)
    assert none.node is None  # no probe needed: nothing to place
    assert placement_for_bus_id(None).reason == "the device reports no PCI bus id"


def test_the_device_properties_report_the_bus_id_and_the_placement(tmp_path, monkeypatch):
    monkeypatch.setattr(_numa, "SYSFS", fake_sysfs(tmp_path, "-1"))
    props = CudaDeviceProperties.from_dict(
        0, {**H100_PROPERTIES, "pciDomainID": 0, "pciBusID": 0x19, "pciDeviceID": 0}
    )
    assert props.pci_bus_id == BUS
    info = props.to_device_info().properties
    assert info["pciBusId"] == BUS
    assert info["mappedHostMemory"].startswith("no NUMA placement (")
    assert "is -1" in info["mappedHostMemory"]
    bare = CudaDeviceProperties.from_dict(0, H100_PROPERTIES)
    assert bare.pci_bus_id is None
    assert bare.to_device_info().properties["mappedHostMemory"] == (
        "no NUMA placement (the device reports no PCI bus id)"
    )


# -- the allocation, up to the CUDA call -----------------------------------------------------------


@linux_numa
def test_pages_are_on_the_node_before_they_are_registered():
    node = a_local_node()
    seen: dict[str, Any] = {}

    def register(address: int, length: int) -> None:
        seen["register"] = (address, length, page_nodes(address, length))

    def unregister(address: int) -> None:
        seen["unregister"] = (address, ctypes.string_at(address, 4))  # still mapped

    allocation = allocate_on_node(10_000, node, register, unregister)
    address, length, nodes = seen["register"]
    assert (address, length) == (allocation.address, 3 * _numa.PAGE_SIZE)
    assert nodes == [node] * 3  # placed and faulted in before the CUDA call
    view = allocation.array((1250,), np.dtype("<u8"))
    assert (view == 0).all()
    view[:] = 7
    del allocation
    gc.collect()
    assert "unregister" not in seen  # the view holds the pages
    assert int(view.sum()) == 7 * 1250
    del view
    gc.collect()
    assert seen["unregister"] == (address, b"\x07\x00\x00\x00")


@linux_numa
def test_a_failed_registration_unmaps_and_raises():
    calls: list[str] = []

    def register(address: int, length: int) -> None:
        raise OSError(12, "cudaErrorMemoryAllocation")

    with pytest.raises(OSError, match="cudaErrorMemoryAllocation"):
        allocate_on_node(4096, a_local_node(), register, lambda address: calls.append("unregister"))
    gc.collect()
    assert calls == []  # never registered, so never unregistered


@linux_numa
def test_a_node_that_does_not_exist_is_refused_by_the_system():
    with pytest.raises(OSError, match="mbind"):
        allocate_on_node(4096, 1000)


# -- mapped_empty with a fake CuPy: the NUMA path and the fallback --------------------------


class _FakeRuntimeError(Exception):
    pass


class _FakeCupy:
    """The calls of ``mapped_empty``: device, PCI bus id, registration, cudaHostAlloc."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.register_error: BaseException | None = None
        fake = self

        class Runtime:
            CUDARuntimeError = _FakeRuntimeError
            hostAllocPortable = 1
            hostAllocMapped = 2

            @staticmethod
            def getDevice() -> int:
                return 0

            @staticmethod
            def deviceGetPCIBusId(device: int) -> str:
                return "0000:19:00.0"

            @staticmethod
            def hostRegister(address: int, length: int, flags: int) -> None:
                fake.calls.append(("hostRegister", flags))
                if fake.register_error is not None:
                    raise fake.register_error

            @staticmethod
            def hostUnregister(address: int) -> None:
                fake.calls.append(("hostUnregister",))

        class PinnedMemory:
            def __init__(self, nbytes: int, flags: int) -> None:
                fake.calls.append(("cudaHostAlloc", flags))
                self.buffer = bytearray(nbytes)

        class Cuda:
            runtime = Runtime

        Cuda.PinnedMemory = PinnedMemory  # type: ignore[attr-defined]
        Cuda.PinnedMemoryPointer = staticmethod(lambda memory, offset: memory.buffer)  # type: ignore[attr-defined]
        self.cuda = Cuda


@pytest.fixture
def fake_cupy(monkeypatch: pytest.MonkeyPatch) -> _FakeCupy:
    fake = _FakeCupy()
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(_numa, "_placements", {})
    return fake


@linux_numa
def test_mapped_memory_goes_to_the_gpus_node(fake_cupy, tmp_path, monkeypatch):
    node = a_local_node()
    monkeypatch.setattr(
        _numa, "SYSFS", fake_sysfs(tmp_path, str(node), online=f"{node},{node + 1}")
    )
    ring = _memory.mapped_empty((5000,), np.dtype(np.uint8))
    assert fake_cupy.calls == [("hostRegister", 3)]  # Portable | Mapped
    assert set(page_nodes(ring.ctypes.data, ring.nbytes)) == {node}
    assert _numa.host_memory_placement(0).node == node
    del ring
    gc.collect()
    assert fake_cupy.calls[-1] == ("hostUnregister",)


@linux_numa
def test_a_failed_numa_allocation_falls_back_once_and_says_why(fake_cupy, tmp_path, monkeypatch):
    node = a_local_node()
    monkeypatch.setattr(
        _numa, "SYSFS", fake_sysfs(tmp_path, str(node), online=f"{node},{node + 1}")
    )
    fake_cupy.register_error = _FakeRuntimeError("cudaErrorHostMemoryAlreadyRegistered")
    ring = _memory.mapped_empty((64,), np.dtype(np.uint64))
    assert ring.shape == (64,)
    assert fake_cupy.calls == [("hostRegister", 3), ("cudaHostAlloc", 3)]
    placement = _numa.host_memory_placement(0)
    assert placement.node is None
    assert f"allocating on node {node} failed" in placement.reason
    assert "cudaErrorHostMemoryAlreadyRegistered" in placement.reason
    _memory.mapped_empty((64,), np.dtype(np.uint64))
    assert fake_cupy.calls[-1] == ("cudaHostAlloc", 3)  # not tried again
    assert ("hostRegister", 3) not in fake_cupy.calls[2:]


def test_no_node_means_cuda_host_alloc(fake_cupy, tmp_path, monkeypatch):
    monkeypatch.setattr(_numa, "SYSFS", fake_sysfs(tmp_path, "-1"))
    ring = _memory.mapped_empty((3, 4), np.dtype(np.float32))
    assert ring.shape == (3, 4)
    assert fake_cupy.calls == [("cudaHostAlloc", 3)]
    assert "is -1" in _numa.host_memory_placement(0).reason


# -- on a GPU ----------------------------------------------------------------------------------


def on_gpu(test: Any) -> Any:
    """Mark ``test`` ``cuda``, skip it without a GPU, and run it under the watchdog."""
    for mark in (pytest.mark.cuda, requires_gpu(), pytest.mark.usefixtures("gpu_watchdog")):
        test = mark(test)
    return test


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@on_gpu
@pytest.mark.anyio
async def test_rings_in_mapped_memory_on_the_gpus_node(cuda):
    from pdc_core import PersistentKernel, open_persistent_kernel

    placement = _numa.host_memory_placement(cuda.device)
    print(f"mapped host memory for {cuda.qualified_name}: {placement.describe()}")
    assert cuda.device_info.properties["pciBusId"] is not None
    kernel = PersistentKernel("double", REQUEST, REPLY, capacity=256)
    kernel.add_body("cuda", DOUBLE)
    async with open_persistent_kernel(kernel, cuda) as session:
        owner = session.memory.owner
        if placement.node is not None:
            assert set(page_nodes(owner.ctypes.data, owner.nbytes)) == {placement.node}
        for i in range(100):
            reply = await session.request((i, float(i)))
            assert (int(reply["id"]), float(reply["y"])) == (i, 2.0 * i)
        batch = np.zeros(1000, REQUEST)
        batch["id"] = np.arange(1000)
        batch["x"] = 1.5
        replies = await session.request_batch(batch)
        np.testing.assert_array_equal(replies["y"], np.full(1000, 3.0, np.float32))


@on_gpu
def test_mapped_memory_is_read_by_the_device_at_its_host_address(cuda):
    mapped = cuda.allocate((1 << 16,), np.dtype(np.uint32), MemoryKind.MAPPED)
    mapped[:] = np.arange(1 << 16, dtype=np.uint32)
    assert cuda.device_pointer(mapped) != 0
    view = cuda.mapped_device_array(mapped)
    assert int(view.sum(dtype=np.uint64)) == int(np.arange(1 << 16, dtype=np.uint64).sum())
    node = _numa.host_memory_placement(cuda.device).node
    if node is not None:
        assert set(page_nodes(mapped.ctypes.data, mapped.nbytes)) == {node}
