"""Parsing of CuPy's getDeviceProperties dictionaries, with fake dictionaries."""

from __future__ import annotations

import pytest

pytest.importorskip("pdc_cuda", reason="pdc-cuda is not installed: pip install -e plugins/pdc_cuda")
from pdc_cuda import CudaDeviceProperties

#: What CuPy 14 built for CUDA 12 returns for an H100 (abridged; name is bytes).
H100 = {
    "name": b"NVIDIA H100 80GB HBM3",
    "totalGlobalMem": 85_520_809_984,
    "major": 9,
    "minor": 0,
    "multiProcessorCount": 132,
    "canMapHostMemory": 1,
    "unifiedAddressing": 1,
    "kernelExecTimeoutEnabled": 0,
    "managedMemory": 1,
    "concurrentManagedAccess": 1,
    "hostNativeAtomicSupported": 0,
    "maxThreadsPerBlock": 1024,
    "maxGridSize": (2_147_483_647, 65535, 65535),
    "maxThreadsDim": (1024, 1024, 64),
    "warpSize": 32,
    "cooperativeLaunch": 1,
    "maxBlocksPerMultiProcessor": 32,
    "pciBusID": 25,
}


def test_h100_properties():
    props = CudaDeviceProperties.from_dict(0, H100)
    assert props.name == "NVIDIA H100 80GB HBM3"
    assert props.compute_capability == "9.0"
    assert props.arch == "sm_90"
    assert props.multiprocessor_count == 132
    assert props.total_memory == 85_520_809_984
    assert props.can_map_host_memory is True
    assert props.unified_addressing is True
    assert props.kernel_exec_timeout_enabled is False
    assert props.host_native_atomic_supported is False
    assert props.max_threads_per_block == 1024
    assert props.max_grid_dim_x == 2_147_483_647
    info = props.to_device_info()
    assert info.qualified_name == "cuda:0"
    assert info.kind == "gpu"
    assert info.name == "NVIDIA H100 80GB HBM3"
    assert info.total_memory == 85_520_809_984
    for key in (
        "compute_capability",
        "multiProcessorCount",
        "canMapHostMemory",
        "unifiedAddressing",
        "kernelExecTimeoutEnabled",
    ):
        assert key in info.properties
    assert info.properties["maxThreadsDim"] == (1024, 1024, 64)
    assert info.properties["warpSize"] == 32


def test_fields_missing_from_the_dict_come_from_device_attributes():
    # CUDA 13 dropped kernelExecTimeoutEnabled (and others) from cudaDeviceProp.
    trimmed = {
        k: v
        for k, v in H100.items()
        if k not in {"kernelExecTimeoutEnabled", "canMapHostMemory", "maxGridSize"}
    }
    asked: list[str] = []

    def attribute(key: str) -> int | None:
        asked.append(key)
        return {"kernelExecTimeoutEnabled": 1, "canMapHostMemory": 1, "maxGridDimX": 1000}.get(key)

    props = CudaDeviceProperties.from_dict(3, trimmed, attribute, total_memory=42)
    assert props.kernel_exec_timeout_enabled is True
    assert props.can_map_host_memory is True
    assert props.max_grid_dim_x == 1000
    assert props.total_memory == 42
    assert set(asked) == {"kernelExecTimeoutEnabled", "canMapHostMemory", "maxGridDimX"}
    assert props.to_device_info().qualified_name == "cuda:3"


def test_unknown_fields_are_none_not_false():
    props = CudaDeviceProperties.from_dict(0, {"name": "odd", "major": 8, "minor": 6})
    assert props.can_map_host_memory is None
    assert props.kernel_exec_timeout_enabled is None
    assert props.multiprocessor_count is None
    assert props.max_threads_per_block == 1024  # CUDA's limit, the safe default


@pytest.mark.parametrize(
    ("raw", "name"),
    [
        (b"Tesla T4\0\0garbage", "Tesla T4"),
        ("  A100  ", "A100"),
        (b"", "unknown CUDA device"),
        (None, "unknown CUDA device"),
    ],
)
def test_names(raw, name):
    assert CudaDeviceProperties.from_dict(0, {"name": raw, "major": 7, "minor": 5}).name == name


def test_bad_dictionaries_are_named():
    with pytest.raises(ValueError, match="device 2 reports no compute capability"):
        CudaDeviceProperties.from_dict(2, {"name": b"x"})
    with pytest.raises(ValueError, match=r"multiProcessorCount='many'"):
        CudaDeviceProperties.from_dict(0, {**H100, "multiProcessorCount": "many"})
