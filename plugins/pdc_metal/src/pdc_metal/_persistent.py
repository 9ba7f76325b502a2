"""The metal backend's persistent kernel: the ring protocol emulated on MLX.

Metal has no way to keep a compute kernel resident and polling host-mapped memory from
Python, so the metal backend emulates the persistent kernel: a host worker thread (the
shared :class:`pdc_core.backend.HostWorkerKernel`) runs the protocol of
``docs/ring-protocol.md`` on the same ring layout as every backend, and drives MLX work
on a dedicated MLX stream of its own, made that thread's default for its whole life.
Per contiguous run of requests it converts the request fields to MLX arrays, calls the
kernel's ``metal`` body once, evaluates the result (``mx.eval``) on its stream, checks
it and writes it into the reply slots.

The ``metal`` body's calling convention is documented at the public name,
:meth:`pdc_metal.MetalBackend.launch_persistent_kernel`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from pdc_core import Backend, RecordError
from pdc_core.backend import (
    HostWorkerKernel,
    PersistentKernelSpec,
    RingMemory,
    record_from_mapping,
)

from . import _mlx

__all__ = ["MetalResidentKernel", "launch"]


def _field_dtypes(dtype: np.dtype[Any], what: str) -> dict[str, np.dtype[Any]] | None:
    """``{field: dtype}`` of a record dtype (``None`` for one without fields), each
    checked to be one MLX holds exactly."""
    if dtype.fields is None:
        _check_mlx(dtype, f"the {what} dtype {dtype}")
        return None
    fields: dict[str, np.dtype[Any]] = {}
    for name in dtype.names or ():
        field = dtype.fields[name][0]
        base = field.base if field.subdtype is not None else field
        _check_mlx(base, f"field {name!r} of the {what} dtype ({field})")
        fields[name] = field
    return fields


def _check_mlx(dtype: np.dtype[Any], what: str) -> None:
    try:
        _mlx.to_mlx_dtype(dtype)
    except TypeError as exc:
        raise TypeError(
            f"the metal backend cannot run this persistent kernel: {what}: {exc}"
        ) from None


class MetalResidentKernel(HostWorkerKernel):
    """A persistent kernel emulated on MLX: a worker thread with a dedicated MLX stream.

    Launch options: those of :class:`~pdc_core.backend.HostWorkerKernel` (``worker_wait``,
    ``host_wait``, ``idle_timeout``). See :mod:`pdc_metal._persistent` for the
    ``metal`` body's calling convention.
    """

    body_backend = "metal"

    def __init__(
        self, backend: Backend, kernel: PersistentKernelSpec, memory: RingMemory, **options: Any
    ) -> None:
        kernel.body_for(self.body_backend)  # a missing body is reported first
        device = cast(_mlx.MlxDevice, backend)  # the metal backend (or a stand-in for it)
        self._mx = device.mx
        self._mlx_device = device.mlx_device
        self._request_fields = _field_dtypes(kernel.request_dtype, "request")
        self._reply_fields = _field_dtypes(kernel.reply_dtype, "reply")
        if kernel.state is not None:
            _check_mlx(kernel.state.dtype, f"the state's dtype {kernel.state.dtype}")
        super().__init__(backend, kernel, memory, **options)

    # -- hooks --------------------------------------------------------------------------

    def make_state(self, initial: npt.NDArray[Any]) -> Any:
        mx = self._mx
        state = mx.array(np.ascontiguousarray(initial), dtype=_mlx.to_mlx_dtype(initial.dtype))
        mx.eval(state)
        return state

    def state_to_host(self, state: Any) -> npt.NDArray[Any]:
        return np.array(state, copy=True)

    @contextlib.contextmanager
    def worker_context(self) -> Iterator[None]:
        mx = self._mx
        stream = mx.new_stream(self._mlx_device)
        try:
            with mx.stream(stream):
                yield
        finally:
            mx.synchronize(stream)

    def _to_mlx(self, values: npt.NDArray[Any]) -> Any:
        return self._mx.array(
            np.ascontiguousarray(values), dtype=_mlx.to_mlx_dtype(values.dtype.base)
        )

    def call_body(self, requests: npt.NDArray[Any]) -> Any:
        mx = self._mx
        if self._request_fields is None:
            inputs: Any = self._to_mlx(requests)
        else:
            inputs = {name: self._to_mlx(requests[name]) for name in self._request_fields}
        state = self.state
        if state is None:
            result = self.body(inputs)
            mx.eval(_arrays(result))
            return result
        result = self.body(inputs, state)
        if isinstance(result, tuple) and len(result) == 2:
            result, new_state = result
            if not isinstance(new_state, mx.array):
                raise TypeError(
                    f"the body returned a new state of type {type(new_state).__name__}; "
                    "it must be an MLX array"
                )
            if tuple(new_state.shape) != tuple(state.shape) or new_state.dtype != state.dtype:
                raise ValueError(
                    f"the body returned a new state of shape {tuple(new_state.shape)} and "
                    f"dtype {new_state.dtype}; the state is {tuple(state.shape)} {state.dtype}"
                )
            state = self.state = new_state
        mx.eval(_arrays(result), state)
        return result

    def store_replies(self, result: Any, replies: npt.NDArray[Any]) -> None:
        count = len(replies)
        fields = self._reply_fields
        if fields is None:
            _store(result, replies, replies.dtype, count, "the reply")
            return
        if not isinstance(result, Mapping):
            raise RecordError(
                f"the metal body returned {type(result).__name__} for {count} request(s); "
                f"it must return a mapping of the reply fields ({', '.join(fields)}) to "
                f"arrays of {count} rows"
            )
        # Exactly the reply fields, or a RecordError naming the missing and unknown ones.
        values = record_from_mapping(result, replies.dtype, "metal body's reply")
        for (name, dtype), value in zip(fields.items(), values, strict=True):
            _store(value, replies[name], dtype, count, f"reply field {name!r}")


def _arrays(result: Any) -> list[Any]:
    """The values of a reply mapping (or the reply itself) for ``mx.eval``."""
    import mlx.core as mx

    values = result.values() if isinstance(result, Mapping) else (result,)
    return [value for value in values if isinstance(value, mx.array)]


def _store(
    value: Any, target: npt.NDArray[Any], dtype: np.dtype[Any], count: int, what: str
) -> None:
    if value is None:
        raise RecordError(f"{what} is None; it must be an array of {count} rows")
    try:
        array = np.asarray(value)
    except Exception as exc:
        raise RecordError(f"{what} is a {type(value).__name__}, not an array ({exc})") from None
    expected = target.shape
    if array.shape != expected:
        raise RecordError(
            f"{what} has shape {array.shape} for {count} request(s); it must have shape "
            f"{expected} (one row per request)"
        )
    base = dtype.base
    if not np.can_cast(array.dtype, base, casting="same_kind"):
        raise RecordError(f"{what} has dtype {array.dtype}, which does not cast to {base}")
    target[...] = array


def launch(
    backend: Backend, kernel: PersistentKernelSpec, rings: RingMemory, **options: Any
) -> HostWorkerKernel:
    """``MetalBackend.launch_persistent_kernel``: start the worker thread."""
    return MetalResidentKernel.launch(backend, kernel, rings, **options)
