"""The persistent-kernel spec: what to run resident, on which backends, over which records.

A :class:`PersistentKernelSpec` names the record layouts of its request and reply
slots, the capacity of its rings, one *body* per backend (CUDA C device-function source
as a :class:`DeviceSource` for compiling backends, a Python callable for host backends)
and optional device-resident state. Backends read it in
``Backend.launch_persistent_kernel``. Users build the subclass
:class:`~pdc_core.PersistentKernel` (or use :func:`~pdc_core.persistent_kernel`),
which adds only what this layer cannot say: the type of the handle
``nursery.start_actor(kernel)`` returns, an actor of the layer above. This layer
knows no actor.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Generic, Self, TypeVar, overload

import numpy as np
import numpy.typing as npt

from .._exceptions import KernelBodyMissing
from .._loop import check_count
from ._ring import RingLayout, record_dtype

__all__ = [
    "DEFAULT_CAPACITY",
    "DeviceSource",
    "PersistentKernelSpec",
    "RepT",
    "ReqT",
]

F = TypeVar("F", bound=Callable[..., Any])

#: Slots of each ring when no ``capacity`` is given (why 4096:
#: :func:`~pdc_core.persistent_kernel`).
DEFAULT_CAPACITY: Final = 4096

if TYPE_CHECKING:
    from typing_extensions import TypeVar as DefaultTypeVar

    #: The NumPy scalar type of a kernel's request records: ``numpy.void`` for a
    #: structured dtype, ``numpy.float64`` for ``float64``; ``Any`` when not known.
    ReqT = DefaultTypeVar("ReqT", bound=np.generic, default=Any)
    #: The NumPy scalar type of its reply records.
    RepT = DefaultTypeVar("RepT", bound=np.generic, default=Any)
else:  # typing.TypeVar has no default before Python 3.13; only checkers read it
    ReqT = TypeVar("ReqT", bound=np.generic)
    RepT = TypeVar("RepT", bound=np.generic)


@dataclass(frozen=True)
class DeviceSource:
    """The body of a persistent kernel for a compiling backend (CUDA C, Metal, ...).

    ``source`` defines a device function named ``entry``; how the backend wraps it in
    its resident loop (and the exact signature it expects) is documented by the
    backend. ``options`` are extra compiler options.
    """

    source: str
    entry: str = "pdc_body"
    options: tuple[str, ...] = ()


def _backend_key(backend: str) -> str:
    if not isinstance(backend, str) or not backend:
        raise TypeError(f"a backend name must be a non-empty str, not {backend!r}")
    return backend.partition(":")[0].lower()


#: Backends whose persistent-kernel body is a Python callable, and over what.
_CALLABLE_BODIES: Final = {"cpu": "NumPy record arrays", "metal": "MLX arrays"}


class PersistentKernelSpec(Generic[ReqT, RepT]):
    """What a persistent kernel is: record layouts, ring capacity, bodies, state.

    This is what backends read; users build a :class:`~pdc_core.PersistentKernel`, the
    subclass that also types the handle ``start_actor`` returns for it (everything
    below applies to it). A backend accepts any spec: a
    :class:`~pdc_core.PersistentPipeline`'s kernel is one too.

    ``request_dtype`` and ``reply_dtype`` are the record layouts of the input and
    output slots (structured dtypes, ideally with ``align=True``; see
    ``docs/ring-protocol.md``). ``capacity`` is the number of slots of each ring
    (default 4096: see :func:`~pdc_core.persistent_kernel` for the measurement behind it).
    The kernel answers every request with exactly one reply, in request order.
    ``max_batch`` caps how many requests one body call gets (default: ``capacity``).
    ``state`` is the initial value of optional device-resident state: the backend
    copies it to device memory at launch, and the body receives it with every batch.

    Bodies are registered per backend name (``"cpu"``, ``"cuda"``, ...):

    * ``cpu``: a callable ``body(requests) -> replies`` (or ``body(requests, state)``
      when the kernel has state) over NumPy record arrays, batch in, batch out: it
      gets a read-only array of ``n >= 1`` requests and returns ``n`` replies of
      ``reply_dtype``. The request array is only valid during the call.
    * ``metal``: a callable over MLX arrays (MLX has no structured dtypes):
      ``body(requests) -> replies`` (``body(requests, state)`` with state), where
      ``requests`` maps each request field name to an MLX array with one row per
      request, in the field's dtype, and ``replies`` maps every reply field name to an
      array of ``n`` rows; with state it may also return ``(replies, new_state)``.
      A wrong reply (missing or unknown field, wrong shape) crashes the kernel with
      ``ErrorCode.BAD_REPLY`` naming the field (the details:
      ``pdc_metal.MetalBackend.launch_persistent_kernel``).
    * compiling backends: a :class:`DeviceSource` (a plain ``str`` is taken as the
      source of a function named ``pdc_body``).

    Use :meth:`body` as a decorator, :meth:`add_body`, or
    :func:`~pdc_core.persistent_kernel`.
    """

    @overload
    def __init__(
        self: PersistentKernelSpec[ReqT, RepT],
        name: str,
        request_dtype: np.dtype[ReqT],
        reply_dtype: np.dtype[RepT],
        *,
        capacity: int = DEFAULT_CAPACITY,
        max_batch: int | None = None,
        state: npt.ArrayLike | None = None,
        bodies: Mapping[str, Any] | None = None,
    ) -> None: ...

    @overload
    def __init__(
        self: PersistentKernelSpec[Any, Any],
        name: str,
        request_dtype: npt.DTypeLike,
        reply_dtype: npt.DTypeLike,
        *,
        capacity: int = DEFAULT_CAPACITY,
        max_batch: int | None = None,
        state: npt.ArrayLike | None = None,
        bodies: Mapping[str, Any] | None = None,
    ) -> None: ...

    def __init__(
        self,
        name: str,
        request_dtype: npt.DTypeLike,
        reply_dtype: npt.DTypeLike,
        *,
        capacity: int = DEFAULT_CAPACITY,
        max_batch: int | None = None,
        state: npt.ArrayLike | None = None,
        bodies: Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise TypeError(f"a persistent kernel needs a non-empty str name, not {name!r}")
        self.name = name
        # Each count is checked under the name the caller gave it (max_batch defaults
        # to the checked capacity, so capacity's errors never name max_batch).
        self.layout = RingLayout(request_dtype, reply_dtype, check_count(capacity, "capacity"))
        self.max_batch = (
            self.layout.in_capacity if max_batch is None else check_count(max_batch, "max_batch")
        )
        self.state: npt.NDArray[Any] | None = None
        if state is not None:
            initial = np.array(state, copy=True)
            record_dtype(initial.dtype, "state")
            self.state = initial
        self._bodies: dict[str, Any] = {}
        for backend, body in (bodies or {}).items():
            self.add_body(backend, body)

    @property
    def request_dtype(self) -> np.dtype[ReqT]:
        """The structured dtype of a request record (one input slot)."""
        return self.layout.request_dtype

    @property
    def reply_dtype(self) -> np.dtype[RepT]:
        """The structured dtype of a reply record (one output slot)."""
        return self.layout.reply_dtype

    @property
    def capacity(self) -> int:
        """Slots of the input ring: the most requests in flight at once."""
        return self.layout.in_capacity

    @property
    def bodies(self) -> Mapping[str, Any]:
        """The registered bodies by backend name (read-only)."""
        return MappingProxyType(self._bodies)

    def add_body(self, backend: str, body: Any) -> Self:
        """Register ``body`` for ``backend`` (replacing any previous one); returns self."""
        key = _backend_key(backend)
        if isinstance(body, str):
            body = DeviceSource(body)
        if key in _CALLABLE_BODIES and not callable(body):
            raise TypeError(
                f"the {key} body of persistent kernel {self.name!r} must be a callable over "
                f"{_CALLABLE_BODIES[key]}, not {type(body).__name__}"
            )
        if body is None:
            raise TypeError(f"the {key} body of persistent kernel {self.name!r} is None")
        self._bodies[key] = body
        return self

    def body(self, backend: str) -> Callable[[F], F]:
        """Decorator registering the decorated function as the body for ``backend``."""

        def register(fn: F) -> F:
            self.add_body(backend, fn)
            return fn

        return register

    def body_for(self, backend: str) -> Any:
        """The body for ``backend`` (``"cuda:1"`` counts as ``"cuda"``).

        Raises :class:`~pdc_core.KernelBodyMissing` naming the backends that have one.
        """
        key = _backend_key(backend)
        try:
            return self._bodies[key]
        except KeyError:
            have = ", ".join(sorted(self._bodies)) or "none"
            raise KernelBodyMissing(
                f"persistent kernel {self.name!r} has no body for the {key} backend; "
                f"it has bodies for: {have}"
            ) from None

    def __repr__(self) -> str:
        return (
            f"<PersistentKernel {self.name!r} {self.request_dtype} -> {self.reply_dtype} "
            f"capacity={self.capacity} bodies={sorted(self._bodies)}>"
        )
