"""What the ring protocol and resident kernels need of a backend: the bottom of ``_backend``.

:class:`MemoryKind` names where an allocation lives; :class:`DeviceLike` is the part of
the :class:`~pdc_core.backend.Backend` contract that the ring memory and the resident
kernel handle use (every backend is one). They sit below the contract, which names the
ring, the persistent kernel and the resident kernel in its own signatures, so the arrows
between these modules point one way.
"""

from __future__ import annotations

import enum
from typing import Any, Protocol

import numpy as np

__all__ = ["DeviceLike", "MemoryKind"]


class MemoryKind(enum.StrEnum):
    """Where an allocation lives."""

    HOST = "host"
    DEVICE = "device"
    PINNED = "pinned"
    MAPPED = "mapped"
    MANAGED = "managed"


class DeviceLike(Protocol):
    """A backend as the ring memory and a resident kernel see it."""

    @property
    def name(self) -> str:
        """The backend's name (``cpu``, ``cuda``, ...)."""

    @property
    def qualified_name(self) -> str:
        """The backend and its device (``cuda:0``)."""

    def allocate(self, shape: tuple[int, ...], dtype: np.dtype[Any], kind: MemoryKind = ...) -> Any:
        """An uninitialised array of ``kind`` memory."""
