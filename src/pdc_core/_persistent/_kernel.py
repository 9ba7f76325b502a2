"""The persistent kernel users build: the spec, plus the type of its actor handle.

:class:`PersistentKernel` is a :class:`~pdc_core.backend.PersistentKernelSpec` (record
layouts, ring capacity, bodies, state: everything a backend reads, documented there)
that also tells type checkers which handle ``nursery.start_actor(kernel)`` returns: a
``KernelActorRef[ReqT, RepT]`` of its record types. The spec sits in the device layer,
which knows no actor; the kernel and its handle refer to each other, so the kernel is
defined here, above both. At run time the kernel actor registers every spec as a
``start_actor`` target; nothing else differs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, overload

import numpy as np
import numpy.typing as npt

from .._backend._persistent_kernel import DEFAULT_CAPACITY, PersistentKernelSpec, RepT, ReqT

if TYPE_CHECKING:
    from ._actor import KernelActorRef

__all__ = ["PersistentKernel", "persistent_kernel"]


class PersistentKernel(PersistentKernelSpec[ReqT, RepT]):
    """A persistent kernel: record layouts, ring capacity, bodies, state.

    Built as its base :class:`~pdc_core.backend.PersistentKernelSpec` is (the same
    arguments, attributes and methods: see it for each), and run with
    :func:`~pdc_core.open_persistent_kernel` or as an actor,
    ``await nursery.start_actor(kernel)``.

    Types: ``PersistentKernel(name, request_dtype, reply_dtype)`` given ``numpy.dtype``
    objects is a ``PersistentKernel[ReqT, RepT]`` of their scalar types (``numpy.void``
    for a structured dtype), else a ``PersistentKernel[Any, Any]``; ``start_actor``
    returns its handle as a :class:`~pdc_core.KernelActorRef` ``[ReqT, RepT]``.
    """

    if TYPE_CHECKING:
        # For type checkers only (see pdc_core.lowlevel.StartsAs): the handle that
        # nursery.start_actor(kernel) returns. The kernel actor registers the spec
        # with runner_for at run time.
        def __pdc_handle__(self) -> KernelActorRef[ReqT, RepT]: ...


@overload
def persistent_kernel(
    *,
    request_dtype: np.dtype[ReqT],
    reply_dtype: np.dtype[RepT],
    capacity: int = DEFAULT_CAPACITY,
    name: str | None = None,
    max_batch: int | None = None,
    state: npt.ArrayLike | None = None,
    backend: str = "cpu",
) -> Callable[[Callable[..., Any]], PersistentKernel[ReqT, RepT]]: ...


@overload
def persistent_kernel(
    *,
    request_dtype: npt.DTypeLike,
    reply_dtype: npt.DTypeLike,
    capacity: int = DEFAULT_CAPACITY,
    name: str | None = None,
    max_batch: int | None = None,
    state: npt.ArrayLike | None = None,
    backend: str = "cpu",
) -> Callable[[Callable[..., Any]], PersistentKernel[Any, Any]]: ...


def persistent_kernel(
    *,
    request_dtype: npt.DTypeLike,
    reply_dtype: npt.DTypeLike,
    capacity: int = DEFAULT_CAPACITY,
    name: str | None = None,
    max_batch: int | None = None,
    state: npt.ArrayLike | None = None,
    backend: str = "cpu",
) -> Callable[[Callable[..., Any]], PersistentKernel[Any, Any]]:
    """Decorator: make a :class:`PersistentKernel` whose ``backend`` body is the function.

    ::

        @persistent_kernel(request_dtype=REQ, reply_dtype=REP, capacity=64)
        def double(requests):
            replies = np.empty(len(requests), REP)
            replies["y"] = requests["x"] * 2
            return replies

        double.add_body("cuda", CUDA_SOURCE)

    ``capacity`` (default 4096) is the slots of each ring: the most requests in flight
    at once, and by default (``max_batch``) the most one body call gets. The default is
    measured (``benchmarks/kernel_capacity.py``, cpu backend, 100,000-record
    ``request_batch``): throughput grows about 3x with each 4x of capacity up to 4096
    (9-12x the 256 slots of earlier releases), then 1.7-2.8x more at 16384 and at most
    1.25x more beyond, while a lone request's round trip does not change. The ring is
    memory held for the kernel's whole life (pinned and host-mapped on a GPU): about
    ``capacity x (request size + reply size)`` plus the cuda backend's sequence words,
    193 KiB at 4096 slots of 16-byte records, 8.3 MiB for 1 KiB records. 4096 keeps
    that modest for the record sizes kernels use and gets most of the gain; a kernel
    streaming large batches of small records should take 16384.

    The name of the kernel is ``name``, else the function's. Raises what
    :class:`PersistentKernel` raises for the arguments (``TypeError``,
    ``ValueError``, :class:`~pdc_core.RecordError` for a dtype that cannot be a
    record), when it decorates.

    Types: given ``numpy.dtype`` objects (``np.dtype([...])`` is a
    ``np.dtype[np.void]``, ``np.dtype(np.float64)`` a ``np.dtype[np.float64]``), the
    decorated name is a ``PersistentKernel[ReqT, RepT]`` of their scalar types, as if
    built with :class:`PersistentKernel`, and its sessions, kernel actors and batches
    carry them; given anything else a dtype can be made from (a list of fields, a
    string), a ``PersistentKernel[Any, Any]``.
    """

    def make(fn: Callable[..., Any]) -> PersistentKernel[Any, Any]:
        kernel = PersistentKernel(
            name or str(getattr(fn, "__name__", "kernel")),
            request_dtype,
            reply_dtype,
            capacity=capacity,
            max_batch=max_batch,
            state=state,
        )
        kernel.add_body(backend, fn)
        return kernel

    return make
