"""A persistent kernel as a mesh: one resident kernel per device of a backend.

Registered with the mesh's :func:`~pdc_core._actors.member_targets`, so that
``start_mesh(kernel, devices="all")`` launches one :class:`PersistentKernelActor` per
device while the actor layer knows no device.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .._actors import member_targets
from .._backend._contract import Backend
from .._backend._persistent_kernel import PersistentKernelSpec
from .._plugins import backend_devices, default_backend_name, get_backend
from ._actor import PersistentKernelActor

__all__: list[str] = []


def _device_backends(devices: object) -> list[Backend]:
    """The backends, one per device, that ``devices`` names."""
    if isinstance(devices, str):
        base = default_backend_name() if devices == "all" else devices
        if ":" in base:
            return [get_backend(base)]
        first = get_backend(base)
        count = len(backend_devices(type(first)))
        return [get_backend(f"{first.name}:{index}") for index in range(count)]
    if isinstance(devices, Sequence) and devices:
        chosen: list[Backend] = []
        for device in devices:
            if isinstance(device, Backend):
                chosen.append(device)
            elif isinstance(device, str):
                chosen.append(get_backend(device))
            else:
                raise TypeError(f"a device is a backend name or a Backend, not {device!r}")
        names = [backend.qualified_name for backend in chosen]
        if len(set(names)) != len(names):
            raise ValueError(f"devices= names a device twice: {names}")
        return chosen
    raise TypeError(
        f"devices must be 'all', a backend name or a list of backend names, not {devices!r}"
    )


@member_targets.register(PersistentKernelSpec)
def _kernel_per_device(
    kernel: PersistentKernelSpec[Any, Any], devices: object, /
) -> list[tuple[str, Callable[[str], object]]]:
    pairs: list[tuple[str, Callable[[str], object]]] = []
    for backend in _device_backends(devices):

        def make(name: str, backend: Backend = backend) -> PersistentKernelActor:
            return PersistentKernelActor(kernel, backend, name=name)

        pairs.append((backend.qualified_name, make))
    return pairs
