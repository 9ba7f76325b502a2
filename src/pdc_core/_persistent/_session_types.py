"""What the persistent-kernel session is built from and reports: the records and
batches it accepts (:data:`RecordLike`, :data:`RecordBatch`), its lifecycle states and
counters, the backend that will run a kernel (:func:`backend_for`), and the check of
its options, made before anything is allocated or launched."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
import numpy.typing as npt

from .._backend._contract import Backend, Capability
from .._backend._persistent_kernel import PersistentKernelSpec, ReqT
from .._loop import (
    check_count,
    check_duration,
    seconds_or_inf,
)
from .._plugins import resolve_backend
from ._leader import ReplyWait

if TYPE_CHECKING:
    pass


#: One record as the session accepts it (see ``pdc_core.backend.coerce_record``): a
#: NumPy scalar or one-record array of the request dtype, a tuple of field values, a
#: mapping of field names, a bytes-like payload of at most one slot, or a Python
#: scalar of a one-field dtype. Which fields a record has is the dtype's business,
#: checked when it is sent: Python's types cannot spell a structured dtype's fields.
RecordLike: TypeAlias = (
    np.generic
    | npt.NDArray[Any]
    | tuple[Any, ...]
    | Mapping[str, Any]
    | bytes
    | bytearray
    | memoryview
    | int
    | float
    | complex
    | str
)
#: A batch as the session accepts it: a 1-D array of the request dtype (used as is)
#: or a sequence of records.
RecordBatch: TypeAlias = "npt.NDArray[ReqT] | Sequence[RecordLike]"

__all__ = [
    "RecordBatch",
    "RecordLike",
    "SessionState",
    "SessionStatistics",
    "backend_for",
]


def backend_for(kernel: PersistentKernelSpec, backend: Backend | str | None) -> Backend:
    """The backend that will run ``kernel``: ``backend``, a name, or the best available.

    Checks everything that can be checked before a launch: raises :class:`TypeError`,
    :class:`~pdc_core.BackendUnavailable`, :class:`~pdc_core.CapabilityError` (no
    persistent kernels) or :class:`~pdc_core.KernelBodyMissing` (no body for it).
    """
    if not isinstance(kernel, PersistentKernelSpec):
        raise TypeError(f"expected a PersistentKernel, not {type(kernel).__name__}")
    backend = resolve_backend(backend)
    backend.require(Capability.PERSISTENT_KERNELS, "run persistent kernels")
    kernel.body_for(backend.name)
    return backend


class SessionState(enum.Enum):
    """Lifecycle of a :class:`PersistentKernelSession`."""

    STARTING = "starting"
    RUNNING = "running"
    PAUSED = "paused"
    STOPPING = "stopping"
    STOPPED = "stopped"
    CRASHED = "crashed"


@dataclass(frozen=True)
class SessionStatistics:
    """Counters of a session. ``unprocessed`` counts requests that were published but
    never answered because the kernel stopped or crashed first (each one failed its
    caller with an error, or was reported by ``receive``). Every reply is counted once:
    ``replied`` is those returned by ``request``/``request_batch``, plus ``received``,
    plus ``discarded`` (replies to ``reply=False`` sends, and those that reached a
    request whose caller was cancelled or failed first); ``sent == replied +
    unprocessed`` once the kernel has stopped."""

    sent: int
    replied: int
    received: int
    discarded: int
    batches: int
    unprocessed: int


def _check_session_options(
    receive_window: int | None, stop_timeout: float, wait: ReplyWait, spin_limit: float
) -> tuple[int | None, float, ReplyWait, float]:
    """The session's options, checked (before anything is launched) and normalised:
    ``receive_window`` ``None`` or a count of at least 1 by the one integer rule
    (:func:`~pdc_core._loop.check_count`), ``stop_timeout`` and ``spin_limit``
    positive durations (``inf`` for none), ``wait`` ``"sleep"`` or ``"spin"``. Raises a
    :class:`TypeError` or :class:`ValueError` naming the option."""
    window = None if receive_window is None else check_count(receive_window, "receive_window")
    stop = seconds_or_inf(check_duration(stop_timeout, "stop_timeout"))
    _check_wait(wait)
    spin = seconds_or_inf(check_duration(spin_limit, "spin_limit"))
    return window, stop, wait, spin


def _check_wait(wait: object) -> None:
    if not isinstance(wait, str) or wait not in ("sleep", "spin"):
        raise ValueError(f"wait must be 'sleep' or 'spin', not {wait!r}")
