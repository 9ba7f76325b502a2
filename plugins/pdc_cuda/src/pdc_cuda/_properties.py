"""CUDA device properties: parsed from CuPy's ``getDeviceProperties`` dictionary.

CuPy returns ``cudaDeviceProp`` as a dict whose keys are the C field names
(``multiProcessorCount``, ``canMapHostMemory``, ...) and whose ``name`` is bytes. The
set of keys depends on the CUDA version CuPy was built for (CUDA 13 removed several
fields, ``kernelExecTimeoutEnabled`` among them), so every field pdc relies on falls
back to ``cudaDeviceGetAttribute`` when the dict lacks it. Parsing is pure and takes
the attribute query as a function, so it is tested with fake dictionaries.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pdc_core import DeviceInfo

__all__ = ["ATTRIBUTE_FALLBACKS", "CudaDeviceProperties"]

#: Property key -> name of the ``cupy.cuda.runtime.cudaDevAttr*`` constant to query when
#: ``getDeviceProperties`` does not report the key.
ATTRIBUTE_FALLBACKS: dict[str, str] = {
    "major": "cudaDevAttrComputeCapabilityMajor",
    "minor": "cudaDevAttrComputeCapabilityMinor",
    "multiProcessorCount": "cudaDevAttrMultiProcessorCount",
    "canMapHostMemory": "cudaDevAttrCanMapHostMemory",
    "unifiedAddressing": "cudaDevAttrUnifiedAddressing",
    "kernelExecTimeoutEnabled": "cudaDevAttrKernelExecTimeout",
    "managedMemory": "cudaDevAttrManagedMemory",
    "concurrentManagedAccess": "cudaDevAttrConcurrentManagedAccess",
    "hostNativeAtomicSupported": "cudaDevAttrHostNativeAtomicSupported",
    "maxThreadsPerBlock": "cudaDevAttrMaxThreadsPerBlock",
    "maxGridDimX": "cudaDevAttrMaxGridDimX",
    "cooperativeLaunch": "cudaDevAttrCooperativeLaunch",
}

#: Fields copied verbatim into :attr:`DeviceInfo.properties` when the driver reports them.
_EXTRA_KEYS = (
    "warpSize",
    "maxThreadsDim",
    "maxGridSize",
    "maxThreadsPerMultiProcessor",
    "maxBlocksPerMultiProcessor",
    "sharedMemPerBlock",
    "sharedMemPerMultiprocessor",
    "regsPerBlock",
    "l2CacheSize",
    "integrated",
    "concurrentKernels",
    "asyncEngineCount",
    "ECCEnabled",
    "pciBusID",
    "pciDeviceID",
    "pciDomainID",
    "computePreemptionSupported",
    "pageableMemoryAccess",
)

AttributeQuery = Callable[[str], int | None]


def _decode_name(raw: object) -> str:
    if isinstance(raw, bytes | bytearray):
        raw = bytes(raw).split(b"\0", 1)[0].decode("utf-8", errors="replace")
    text = str(raw).strip() if raw is not None else ""
    return text or "unknown CUDA device"


@dataclass(frozen=True)
class CudaDeviceProperties:
    """The properties of one CUDA device that pdc uses, with sensible types.

    Booleans are ``None`` when neither the property dict nor the attribute query
    reported them (an old driver or a stub in tests); callers treat ``None`` as
    "unknown", never as yes.
    """

    index: int
    name: str
    major: int
    minor: int
    multiprocessor_count: int | None
    total_memory: int | None
    can_map_host_memory: bool | None
    unified_addressing: bool | None
    kernel_exec_timeout_enabled: bool | None
    managed_memory: bool | None
    concurrent_managed_access: bool | None
    host_native_atomic_supported: bool | None
    max_threads_per_block: int
    max_grid_dim_x: int
    cooperative_launch: bool | None
    extra: Mapping[str, Any] = field(default_factory=dict)
    #: The PCI address as sysfs names it (``"0000:19:00.0"``), ``None`` when unreported.
    pci_bus_id: str | None = None

    @property
    def compute_capability(self) -> str:
        """``"9.0"`` for an H100."""
        return f"{self.major}.{self.minor}"

    @property
    def arch(self) -> str:
        """The NVRTC real architecture, ``"sm_90"`` for an H100."""
        return f"sm_{self.major}{self.minor}"

    @classmethod
    def from_dict(
        cls,
        index: int,
        props: Mapping[str, Any],
        attribute: AttributeQuery | None = None,
        total_memory: int | None = None,
    ) -> CudaDeviceProperties:
        """Parse CuPy's ``getDeviceProperties(index)`` result.

        ``attribute(key)`` answers for keys of :data:`ATTRIBUTE_FALLBACKS` missing
        from ``props`` (returning ``None`` when it cannot); ``total_memory`` overrides
        ``totalGlobalMem`` (pass ``cudaMemGetInfo``'s total when known).
        """

        def raw(key: str) -> Any:
            if key in props and props[key] is not None:
                return props[key]
            if attribute is not None and key in ATTRIBUTE_FALLBACKS:
                return attribute(key)
            return None

        def as_int(key: str) -> int | None:
            value = raw(key)
            if value is None:
                return None
            try:
                return int(value)
            except (TypeError, ValueError):
                raise ValueError(
                    f"CUDA device {index} reports {key}={value!r}, which is not an integer"
                ) from None

        def as_bool(key: str) -> bool | None:
            value = as_int(key)
            return None if value is None else bool(value)

        major, minor = as_int("major"), as_int("minor")
        if major is None or minor is None:
            raise ValueError(f"CUDA device {index} reports no compute capability")
        grid = props.get("maxGridSize")
        grid_x = as_int("maxGridDimX")
        if grid_x is None and isinstance(grid, tuple | list) and grid:
            grid_x = int(grid[0])
        memory = total_memory if total_memory is not None else as_int("totalGlobalMem")
        # cudaDeviceProp's PCI fields (CUDA 12 and 13 both report them).
        pci = [props.get(key) for key in ("pciDomainID", "pciBusID", "pciDeviceID")]
        pci_bus_id = None
        match pci:
            case [int(domain), int(bus), int(device)]:
                pci_bus_id = f"{domain:04x}:{bus:02x}:{device:02x}.0"
        return cls(
            index=index,
            name=_decode_name(props.get("name")),
            major=major,
            minor=minor,
            multiprocessor_count=as_int("multiProcessorCount"),
            total_memory=memory,
            can_map_host_memory=as_bool("canMapHostMemory"),
            unified_addressing=as_bool("unifiedAddressing"),
            kernel_exec_timeout_enabled=as_bool("kernelExecTimeoutEnabled"),
            managed_memory=as_bool("managedMemory"),
            concurrent_managed_access=as_bool("concurrentManagedAccess"),
            host_native_atomic_supported=as_bool("hostNativeAtomicSupported"),
            max_threads_per_block=as_int("maxThreadsPerBlock") or 1024,
            max_grid_dim_x=grid_x or 2**31 - 1,
            cooperative_launch=as_bool("cooperativeLaunch"),
            extra={
                key: tuple(props[key]) if isinstance(props[key], list) else props[key]
                for key in _EXTRA_KEYS
                if key in props
            },
            pci_bus_id=pci_bus_id,
        )

    def to_device_info(self, backend: str = "cuda") -> DeviceInfo:
        """The backend-neutral :class:`~pdc_core.DeviceInfo` of this device.

        Besides the parsed fields it reports ``pciBusId`` and ``mappedHostMemory``: where
        ``MemoryKind.MAPPED`` memory (rings) for this device goes -- the NUMA node close
        to the GPU, or no placement and why (read from sysfs; an allocation that later
        fails there falls back to any node and says so).
        """
        from ._numa import placement_for_bus_id

        properties: dict[str, Any] = {
            "compute_capability": self.compute_capability,
            "arch": self.arch,
            "multiProcessorCount": self.multiprocessor_count,
            "canMapHostMemory": self.can_map_host_memory,
            "unifiedAddressing": self.unified_addressing,
            "kernelExecTimeoutEnabled": self.kernel_exec_timeout_enabled,
            "managedMemory": self.managed_memory,
            "concurrentManagedAccess": self.concurrent_managed_access,
            "hostNativeAtomicSupported": self.host_native_atomic_supported,
            "maxThreadsPerBlock": self.max_threads_per_block,
            "maxGridDimX": self.max_grid_dim_x,
            "cooperativeLaunch": self.cooperative_launch,
            "pciBusId": self.pci_bus_id,
            "mappedHostMemory": placement_for_bus_id(self.pci_bus_id).describe(),
        }
        properties.update(self.extra)
        return DeviceInfo(
            backend=backend,
            index=self.index,
            name=self.name,
            kind="gpu",
            total_memory=self.total_memory,
            properties=properties,
        )
