"""The caller's side of a persistent kernel resident in a remote process.

``start_actor(kernel, placement=pdc_ray.on(num_gpus=1))`` runs a
:class:`~pdc_core.PersistentKernel` resident in a Ray worker (on its GPU with the
``cuda`` backend, or on whatever backend :func:`pdc_ray.on`'s ``backend`` names) and
returns a :class:`RemoteKernelRef`: the API of :class:`~pdc_core.KernelActorRef` over
the wire. :meth:`RemoteKernelRef.ask_batch` ships a structured array as one request:
one Ray call carries it (with whatever else is queued, up to ``max_batch`` requests),
the remote side writes the call's records into the kernel's ring with one
``request_batch`` (one ring write when the ring has room for them) and ships the
replies back as one structured array.

Everything :class:`~pdc_ray.RemoteRunner` guarantees holds (start handshake, lifetime,
crashes and losses, heartbeat, cancellation, bounded window, at-most-once delivery).
Beyond a local kernel actor: ``priority`` orders requests in the local mailbox before
they reach the ring (a local kernel's ring is FIFO only), and a batch counts as one
message of the mailbox's ``capacity``, whatever its number of records.
"""

# ruff: noqa: ASYNC109
# ``timeout`` parameters are the ActorRef API.

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from pdc_core import ActorStopped, PersistentKernel
from pdc_core.backend import coerce_batch, coerce_record, records_copy
from pdc_core.lowlevel import (
    DEFAULT_PRIORITY,
    TIMED_OUT,
    cancel_called,
    cancellation_first,
    check_priority,
    check_timeout,
    raise_cancelled,
)

from ._runner import RemoteActorRef, RemoteRunner
from ._runner_state import _Request

__all__ = ["RemoteKernelRef", "RemoteKernelRunner"]


def _first(replies: Any) -> Any:
    """The reply record of a one-record request."""
    return replies[0]


class RemoteKernelRef(RemoteActorRef[Any, Any]):
    """The handle of a persistent kernel resident in a remote process.

    Messages are records of the kernel's ``request_dtype`` (a tuple, a mapping, a
    structured scalar or a one-record array); replies are records of its
    ``reply_dtype``. Bad records raise :class:`~pdc_core.RecordError` before anything
    is queued. :meth:`ask_batch`, :meth:`ask_many` and :meth:`tell_many` send a whole
    batch as one request. ``priority`` (default 128) orders requests in the local
    mailbox.
    """

    __slots__ = ("kernel",)

    def __init__(self, runner: RemoteRunner) -> None:
        super().__init__(runner)
        kernel = runner.spec.target
        if not isinstance(kernel, PersistentKernel):
            raise TypeError(f"a RemoteKernelRef runs a PersistentKernel, not {kernel!r}")
        #: The kernel this actor runs.
        self.kernel = kernel

    def _batch(self, messages: Iterable[Any]) -> Any:
        """A batch is one record array of the kernel's ``request_dtype``."""
        if not isinstance(messages, np.ndarray | Sequence):
            messages = list(messages)
        return coerce_batch(messages, self.kernel.request_dtype)

    # -- delivery (the rules are ActorRef's) --------------------------------------------

    async def _deliver(self, message: Any, priority: int) -> None:
        """Queue one record whose reply is discarded (copied: the caller may reuse it)."""
        record = coerce_record(message, self.kernel.request_dtype)
        await self._post(records_copy(record), priority)

    async def _deliver_many(self, messages: Any, priority: int | list[int]) -> None:
        """Queue a batch of records, as one request, whose replies are discarded
        (copied: the caller may reuse its array)."""
        assert isinstance(priority, int)  # a record array carries one priority
        await self._post(records_copy(messages), priority)

    async def _request(self, message: Any, priority: int, timeout: float | None) -> Any:
        """Send one record and return the kernel's reply record."""
        record = coerce_record(message, self.kernel.request_dtype)
        replies = await self._runner.request(record, priority, timeout)
        return replies if replies is TIMED_OUT else replies[0]

    def _post_request(self, message: Any, priority: int, target: Any) -> bool:
        """One record whose reply record goes to ``target`` (a mesh's reply slot)."""
        try:
            record = coerce_record(message, self.kernel.request_dtype)
        except Exception as error:
            target.set_exception(error)
            return True
        return self._runner.post_request(record, priority, target, _first)

    def _tell_nowait(self, message: Any, priority: int) -> bool | Exception:
        """One record, told at once (copied: the caller may reuse it)."""
        try:
            record = coerce_record(message, self.kernel.request_dtype)
        except Exception as error:
            return error
        return self._runner.tell_nowait(records_copy(record), priority)

    async def _send_request(self, message: Any, priority: int, target: Any) -> None:
        try:
            record = coerce_record(message, self.kernel.request_dtype)
        except Exception as error:
            target.set_exception(error)
            return
        await self._runner.send_request(record, priority, target, _first)

    async def _request_many(
        self, messages: Any, priority: int | list[int], timeout: float | None
    ) -> Any:
        assert isinstance(priority, int)  # a record array carries one priority
        replies = await self._runner.request(messages, priority, timeout)
        return replies if replies is TIMED_OUT else list(replies)

    async def ask_batch(
        self, messages: Any, *, priority: int | None = None, timeout: float | None = None
    ) -> npt.NDArray[Any]:
        """Send a batch of records as one request; return the replies, in order, as one
        record array of the kernel's ``reply_dtype`` (the rules of :meth:`ask_many`
        apply, cancellation included: a caller already cancelled on entry sends
        nothing; cancelled later, the request is given up, here and remotely)."""
        if cancel_called():
            await raise_cancelled()
        if timeout is not None:
            timeout = check_timeout(timeout)
        prio = DEFAULT_PRIORITY if priority is None else check_priority(priority)
        records = self._batch(messages)
        if not len(records):
            return np.empty(0, self.kernel.reply_dtype)
        try:
            replies = await self._runner.request(records, prio, timeout)
        except ActorStopped:
            await cancellation_first()
            raise
        if replies is TIMED_OUT:
            raise self._timeout_error(timeout, len(records))
        result: npt.NDArray[Any] = replies
        return result


class RemoteKernelRunner(RemoteRunner):
    """Runs a remote persistent kernel for its nursery: a :class:`RemoteRunner` whose
    requests are record arrays and whose batches travel as one array each way."""

    ref_type = RemoteKernelRef

    def _pack(self, batch: list[_Request]) -> tuple[Any, ...]:
        items = [(r.id, len(r.message), r.reply is not None) for r in batch]
        arrays = [r.message for r in batch]
        records = arrays[0] if len(arrays) == 1 else np.concatenate(arrays)
        return items, records

    def _distribute(self, batch: list[_Request], payload: Any) -> int:
        replies, skipped = payload
        if not replies.flags.writeable:  # Ray hands large arrays over read-only
            replies = records_copy(replies)
        skip = set(skipped)
        at = handled = 0
        for request in batch:
            if request.id in skip:
                continue
            count = len(request.message)
            handled += count
            if request.reply is not None:
                request.reply.set(request.index, replies[at : at + count])
                at += count
        return handled
