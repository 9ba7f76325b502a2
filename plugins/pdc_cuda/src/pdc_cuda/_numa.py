"""NUMA-local mapped host memory: ring memory on the node the platform says is close to the GPU.

On a machine with several NUMA nodes, a GPU sits on the PCIe root of one of them. Host
memory on that node is what the GPU's reads and writes of mapped memory (a resident
kernel polling its rings) reach without crossing the inter-socket link. Linux says which
node that is in ``/sys/bus/pci/devices/<bus id>/numa_node`` (``-1``: no preference).

The pieces, each testable without a GPU:

* discovery -- :func:`sysfs_bus_id` (CUDA's PCI bus id as sysfs spells it),
  :func:`read_numa_node` and :func:`read_online_nodes` (from a sysfs tree, ``/sys`` or a
  fake one);
* policy -- :func:`choose_placement`: a node when the platform names one, it is online
  and there is more than one node; otherwise no placement, with the reason;
* allocation -- :func:`allocate_on_node`: anonymous ``mmap`` pages given the
  ``MPOL_PREFERRED`` policy for the node with ``mbind``, touched (so they are allocated
  there, before anything pins them), then handed to a ``register`` function -- on a GPU
  ``cudaHostRegister(Portable | Mapped)`` (:func:`numa_mapped_host`), which pins them
  and maps them for the device. ``MPOL_PREFERRED`` rather than ``MPOL_BIND``: a full
  node then falls back to another node instead of failing the page fault (which would
  kill the process, not raise);
* verification -- :func:`page_nodes` (``move_pages`` in query mode) says on which node
  each page lies.

:func:`host_memory_placement` combines them for a CUDA device (cached per device), and
:mod:`pdc_cuda._memory` uses it for every ``MemoryKind.MAPPED`` allocation, falling back
to ``cudaHostAlloc`` (and recording why) when the platform names no node or the
allocation fails.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import platform
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

__all__ = [
    "NumaHostAllocation",
    "NumaPlacement",
    "allocate_on_node",
    "choose_placement",
    "host_memory_placement",
    "numa_mapped_host",
    "page_nodes",
    "placement_for_bus_id",
    "probe_mbind",
    "read_numa_node",
    "read_online_nodes",
    "record_fallback",
    "sysfs_bus_id",
]

SYSFS: Final = Path("/sys")
#: ``mbind`` policy: allocate on the node given, or elsewhere when it is full.
MPOL_PREFERRED: Final = 1
#: ``cudaHostRegisterPortable | cudaHostRegisterMapped``.
CUDA_HOST_REGISTER_PORTABLE: Final = 1
CUDA_HOST_REGISTER_MAPPED: Final = 2
#: System call numbers of ``mbind`` and ``move_pages`` (glibc exports no wrapper for
#: them; libnuma does, but it may not be installed).
SYSCALLS: Final[dict[str, dict[str, int]]] = {
    "x86_64": {"mbind": 237, "move_pages": 279},
    "aarch64": {"mbind": 235, "move_pages": 239},
}
PAGE_SIZE: Final = mmap.PAGESIZE


# -- discovery and policy (pure, given a sysfs tree) --------------------------------------------


def sysfs_bus_id(bus_id: str) -> str:
    """CUDA's PCI bus id (``"0000:3B:00.0"``, or with an 8-digit domain as ``nvidia-smi``
    prints it) as sysfs names the device (``"0000:3b:00.0"``)."""
    try:
        domain, bus, rest = bus_id.strip().split(":")
        device, function = rest.split(".")
        return (
            f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}.{int(function, 16):x}"
        )
    except ValueError:
        raise ValueError(f"{bus_id!r} is not a PCI bus id (domain:bus:device.function)") from None


def parse_node_list(text: str) -> tuple[int, ...]:
    """A sysfs node list (``"0-3,5"``) as sorted node numbers."""
    nodes: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        nodes.update(range(int(first), int(last or first) + 1))
    return tuple(sorted(nodes))


def read_numa_node(bus_id: str, sysfs: Path = SYSFS) -> tuple[int | None, str]:
    """The node sysfs gives for the PCI device ``bus_id`` (``None`` for no preference),
    and where that was read (or why nothing was)."""
    path = sysfs / "bus" / "pci" / "devices" / sysfs_bus_id(bus_id) / "numa_node"
    try:
        text = path.read_text().strip()
    except OSError as exc:
        return None, f"{path} cannot be read ({exc.strerror or exc})"
    try:
        node = int(text)
    except ValueError:
        return None, f"{path} holds {text!r}, not a node number"
    if node < 0:
        return None, f"{path} is {node}: the platform names no node close to the GPU"
    return node, str(path)


def read_online_nodes(sysfs: Path = SYSFS) -> tuple[int, ...] | None:
    """The online NUMA nodes (``None`` when sysfs does not say: a kernel without NUMA)."""
    try:
        return parse_node_list((sysfs / "devices" / "system" / "node" / "online").read_text())
    except (OSError, ValueError):
        return None


@dataclass(frozen=True)
class NumaPlacement:
    """Where mapped host memory for one GPU goes: ``node`` (``None``: wherever the
    allocator puts it, with ``cudaHostAlloc``) and why, in words."""

    node: int | None
    reason: str

    def describe(self) -> str:
        where = f"NUMA node {self.node}" if self.node is not None else "no NUMA placement"
        return f"{where} ({self.reason})"


def choose_placement(
    node: int | None, source: str, online: tuple[int, ...] | None
) -> NumaPlacement:
    """The policy: place on ``node`` when sysfs named it, it is online and there is more
    than one node; otherwise no placement, saying why."""
    if node is None:
        return NumaPlacement(None, source)
    if online is not None and len(online) == 1 and node in online:
        return NumaPlacement(None, f"one NUMA node online ({node}): all host memory is local")
    if online is not None and node not in online:
        listing = ",".join(map(str, online)) or "none"
        return NumaPlacement(None, f"{source} names node {node}, which is not online ({listing})")
    return NumaPlacement(node, f"the GPU's node, from {source}")


# -- system calls ------------------------------------------------------------------------------


def _libc() -> Any:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [
        ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long,
    ]  # fmt: skip
    libc.munmap.restype = ctypes.c_int
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.syscall.restype = ctypes.c_long
    return libc


def _syscall_number(name: str) -> int:
    machine = platform.machine().lower()
    numbers = SYSCALLS.get({"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine))
    if numbers is None:
        raise OSError(errno.ENOSYS, f"pdc knows no {name} system call number for {machine}")
    return numbers[name]


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what} failed: {os.strerror(code)}")


def _mbind_preferred(libc: Any, address: int, length: int, node: int) -> None:
    words = node // 64 + 1
    mask = (ctypes.c_ulong * words)()
    mask[node // 64] = 1 << (node % 64)
    result = libc.syscall(
        ctypes.c_long(_syscall_number("mbind")),
        ctypes.c_void_p(address),
        ctypes.c_ulong(length),
        ctypes.c_int(MPOL_PREFERRED),
        mask,
        ctypes.c_ulong(words * 64 + 1),  # the kernel reads maxnode - 1 bits
        ctypes.c_uint(0),
    )
    _check(result, f"mbind(MPOL_PREFERRED, node {node})")


def page_nodes(address: int, nbytes: int) -> list[int]:
    """The NUMA node of each page of ``[address, address + nbytes)`` (``move_pages`` in
    query mode); a negative entry is ``-errno`` for a page not allocated."""
    first = address - address % PAGE_SIZE
    count = (address + max(nbytes, 1) - first + PAGE_SIZE - 1) // PAGE_SIZE
    pages = (ctypes.c_void_p * count)(*(first + i * PAGE_SIZE for i in range(count)))
    status = (ctypes.c_int * count)()
    libc = _libc()
    result = libc.syscall(
        ctypes.c_long(_syscall_number("move_pages")),
        ctypes.c_int(0),
        ctypes.c_ulong(count),
        pages,
        None,
        status,
        ctypes.c_int(0),
    )
    _check(result, "move_pages (query)")
    return list(status)


# -- allocation --------------------------------------------------------------------------------


def _release(
    libc: Any, address: int, length: int, unregister: Callable[[int], None] | None
) -> None:
    """Unregister (pinned memory must be unpinned before it is unmapped), then unmap."""
    try:
        if unregister is not None:
            unregister(address)
    finally:
        libc.munmap(ctypes.c_void_p(address), ctypes.c_size_t(length))


class NumaHostAllocation:
    """Anonymous host pages placed on one NUMA node, optionally registered with CUDA.

    A NumPy array made from it (``numpy.asarray(allocation)``, which :meth:`array`
    does) holds it through its ``base``; the pages are unregistered and unmapped when
    the last reference goes, so never while a view exists.
    """

    def __init__(
        self,
        nbytes: int,
        node: int,
        register: Callable[[int, int], None] | None = None,
        unregister: Callable[[int], None] | None = None,
    ) -> None:
        if nbytes < 0:
            raise ValueError(f"nbytes must not be negative, got {nbytes}")
        self.node = node
        self.nbytes = nbytes
        self.length = max(PAGE_SIZE, -(-nbytes // PAGE_SIZE) * PAGE_SIZE)
        libc = _libc()
        address = libc.mmap(
            None,
            self.length,
            mmap.PROT_READ | mmap.PROT_WRITE,
            mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
            -1,
            0,
        )
        if address in (None, ctypes.c_void_p(-1).value):
            code = ctypes.get_errno()
            raise OSError(code, f"mmap of {self.length} bytes failed: {os.strerror(code)}")
        self.address = int(address)
        registered = False
        try:
            _mbind_preferred(libc, self.address, self.length, node)
            # Fault every page in now, under the policy, before anything pins them.
            ctypes.memset(self.address, 0, self.length)
            if register is not None:
                register(self.address, self.length)
                registered = True
        except BaseException:
            libc.munmap(ctypes.c_void_p(self.address), ctypes.c_size_t(self.length))
            raise
        self._finalizer = weakref.finalize(
            self, _release, libc, self.address, self.length, unregister if registered else None
        )

    @property
    def __array_interface__(self) -> dict[str, Any]:
        return {
            "version": 3,
            "shape": (self.nbytes,),
            "typestr": "|u1",
            "data": (self.address, False),
        }

    def array(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> npt.NDArray[Any]:
        """A view of ``shape``/``dtype`` over the first bytes; it keeps the pages alive."""
        raw: npt.NDArray[Any] = np.asarray(self)
        count = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        return raw[:count].view(dtype).reshape(shape)

    @property
    def released(self) -> bool:
        """Whether the pages are unregistered and unmapped (never while referenced)."""
        return not self._finalizer.alive


def allocate_on_node(
    nbytes: int,
    node: int,
    register: Callable[[int, int], None] | None = None,
    unregister: Callable[[int], None] | None = None,
) -> NumaHostAllocation:
    """``nbytes`` of zeroed host pages preferring ``node``, passed to ``register(address,
    length)`` once placed (and to ``unregister(address)`` before they are unmapped).
    Raises ``OSError`` when the system refuses (no ``mbind``, a seccomp filter, ...)."""
    return NumaHostAllocation(nbytes, node, register, unregister)


def numa_mapped_host(nbytes: int, node: int) -> NumaHostAllocation:
    """NUMA-local pinned host memory the current CUDA device maps: pages placed on
    ``node``, then ``cudaHostRegister(Portable | Mapped)``."""
    import cupy

    runtime = cupy.cuda.runtime
    flags = CUDA_HOST_REGISTER_PORTABLE | CUDA_HOST_REGISTER_MAPPED
    return allocate_on_node(
        nbytes,
        node,
        register=lambda address, length: runtime.hostRegister(address, length, flags),
        unregister=runtime.hostUnregister,
    )


# -- per device ----------------------------------------------------------------------------------

_lock = threading.Lock()
_placements: dict[int, NumaPlacement] = {}


def probe_mbind(node: int) -> None:
    """Place one page on ``node`` and free it; raises ``OSError`` where the system refuses
    (no NUMA support in the kernel, a seccomp filter, an unknown architecture)."""
    allocate_on_node(PAGE_SIZE, node)  # unreferenced at once: unmapped at once


def placement_for_bus_id(
    bus_id: str | None,
    sysfs: Path | None = None,
    probe: Callable[[int], None] = probe_mbind,
) -> NumaPlacement:
    """Discovery and policy for the PCI device ``bus_id`` (sysfs: :data:`SYSFS`), with a
    ``probe`` that the chosen node can be given pages here."""
    root = SYSFS if sysfs is None else sysfs
    if bus_id is None:
        return NumaPlacement(None, "the device reports no PCI bus id")
    node, source = read_numa_node(bus_id, root)
    placement = choose_placement(node, source, read_online_nodes(root))
    if placement.node is not None:
        try:
            probe(placement.node)
        except OSError as exc:
            return NumaPlacement(None, f"node {placement.node} named by {source}, but {exc}")
    return placement


def host_memory_placement(device: int) -> NumaPlacement:
    """Where mapped host memory for CUDA ``device`` goes (cached for the process; a
    recorded fallback replaces the choice)."""
    with _lock:
        cached = _placements.get(device)
    if cached is not None:
        return cached
    import cupy

    try:
        bus_id: str | None = str(cupy.cuda.runtime.deviceGetPCIBusId(device))
    except cupy.cuda.runtime.CUDARuntimeError:
        bus_id = None
    placement = placement_for_bus_id(bus_id)
    with _lock:
        return _placements.setdefault(device, placement)


def record_fallback(device: int, node: int, error: BaseException) -> NumaPlacement:
    """Remember that a NUMA-local allocation for ``device`` failed, so later ones use
    ``cudaHostAlloc`` at once; returns the placement now in force."""
    placement = NumaPlacement(
        None, f"allocating on node {node} failed ({type(error).__name__}: {error})"
    )
    with _lock:
        _placements[device] = placement
    return placement
