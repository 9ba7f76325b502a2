"""What crosses the wire between a runner and its host: plain, picklable values.

Everything here is shared by both sides and by every engine, so that a fake engine
that round-trips these through ``pickle`` exercises exactly what Ray ships.
"""

from __future__ import annotations

import dataclasses
import pickle
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from pdc_core import ActorStatistics

from ._errors import RemoteError

__all__ = [
    "CRASHED",
    "OK",
    "STOPPED",
    "Failure",
    "HostSpec",
    "Location",
    "UnsentReply",
    "pack_error",
    "portable_statistics",
    "sendable_outcome",
    "unpack_error",
]

T = TypeVar("T")

#: Status codes of a delivered batch and of a host's outcome.
OK: Final = 0
CRASHED: Final = 1
STOPPED: Final = 2


@dataclass(frozen=True, slots=True)
class HostSpec:
    """What a host needs to start the user's actor in its own nursery.

    ``backend`` names the backend a persistent kernel runs on there (``None``: that
    process's best available one); it does not apply to other targets.
    """

    actor_id: str
    target: object
    args: tuple[Any, ...]
    capacity: int
    max_batch: int
    paused: bool
    backend: str | None = None


@dataclass(frozen=True, slots=True)
class Location:
    """Where a remote actor runs: its node, process and accelerators."""

    #: The engine's id of the node (Ray's hex node id).
    node_id: str
    #: The node's IP address.
    node_ip: str
    #: The id of the worker process hosting the actor.
    pid: int
    #: The GPU ids the engine assigned to the actor (empty when none).
    gpu_ids: tuple[str, ...] = ()
    #: The engine's id of the actor (Ray's hex actor id).
    actor_ref_id: str = ""


@dataclass(frozen=True, slots=True)
class Failure:
    """An exception in a form that always pickles: the pickled exception when it
    pickles, and its type name, message and formatted traceback in any case."""

    type_name: str
    message: str
    remote_traceback: str
    pickled: bytes | None


def pack_error(exc: BaseException) -> Failure:
    """Pack ``exc`` (raised here) for the other side."""
    cls = type(exc)
    type_name = f"{cls.__module__}.{cls.__qualname__}"
    formatted = "".join(traceback.format_exception(exc))
    pickled: bytes | None = None
    try:
        data = pickle.dumps(exc)
        pickle.loads(data)  # a class that cannot rebuild itself is caught here
        pickled = data
    except Exception:
        pass
    return Failure(type_name, str(exc), formatted, pickled)


def unpack_error(failure: Failure) -> BaseException:
    """Rebuild the exception of ``failure``: itself with the remote traceback as a
    note, or a :class:`RemoteError` when it cannot be rebuilt here."""
    pickled = failure.pickled
    if pickled is not None:
        try:
            exc = pickle.loads(pickled)
        except Exception:
            pass
        else:
            if isinstance(exc, BaseException):
                exc.add_note(f"remote traceback:\n{failure.remote_traceback.rstrip()}")
                return exc
    error = RemoteError(failure.type_name, failure.message, failure.remote_traceback)
    error.add_note(f"remote traceback:\n{failure.remote_traceback.rstrip()}")
    return error


@dataclass(frozen=True, slots=True)
class UnsentReply:
    """Stands for a reply that could not be pickled on the host: the caller's request
    fails with a :class:`TypeError` saying so (``detail``: why), and the actor goes on."""

    detail: str


def sendable_outcome(outcome: tuple[int, Any], dumps: Callable[[Any], T]) -> T:
    """``dumps(outcome)`` for a ``deliver`` result; when that fails because a reply does
    not pickle, ``dumps`` of the outcome with each such reply replaced by an
    :class:`UnsentReply` (the other replies still go back). Costs nothing more when
    everything pickles."""
    try:
        return dumps(outcome)
    except Exception:
        status, replies = outcome
        if status != OK or not isinstance(replies, list):
            raise
    sendable: list[Any] = []
    for reply in replies:
        try:
            dumps(reply)
        except Exception as exc:
            sendable.append(UnsentReply(f"{type(exc).__name__}: {exc}"))
        else:
            sendable.append(reply)
    return dumps((status, sendable))


def portable_statistics(stats: ActorStatistics) -> ActorStatistics:
    """``stats`` with its mailbox's read-only mapping copied into a dict, so it pickles."""
    mailbox = stats.mailbox
    if mailbox is None:
        return stats
    by_priority: Mapping[int, int] = dict(mailbox.dropped_by_priority)
    return dataclasses.replace(
        stats, mailbox=dataclasses.replace(mailbox, dropped_by_priority=by_priority)
    )
