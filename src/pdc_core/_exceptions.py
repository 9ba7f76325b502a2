"""The exception hierarchy of pdc.

Every exception pdc raises on purpose derives from :class:`PdcError`, and also from
the built-in exception a caller would naturally catch (``LookupError`` for a backend
that cannot be found, ``ValueError`` for misuse of a pool, ...), so code written
against the standard library's exceptions keeps working.
"""

from __future__ import annotations

from collections.abc import Mapping

from anyio import ClosedResourceError, EndOfStream, WouldBlock

__all__ = [
    "BufferError",
    "BufferNotAllocatedError",
    "MessageDeserializationError",
    "MessageError",
    "MessageSerializationError",
    "ActorCrashed",
    "ActorError",
    "ActorStopped",
    "BackendError",
    "BackendUnavailable",
    "CapabilityError",
    "DuplicateActorError",
    "EnvironmentSettingError",
    "KernelAlreadyExistsError",
    "KernelBodyMissing",
    "KernelNotFoundError",
    "KernelStateError",
    "KernelStopTimeout",
    "KernelTerminated",
    "LifecycleError",
    "MailboxClosed",
    "MailboxError",
    "MailboxFull",
    "MessageDropped",
    "MessageTimeout",
    "PdcError",
    "PersistentKernelError",
    "PluginError",
    "PoolError",
    "PoolLimitError",
    "RecordError",
    "RingProtocolError",
    "ShutdownTimeout",
]


class PdcError(Exception):
    """Base class of every error raised by pdc.

    Every pdc error pickles with all its fields (across processes, e.g. to and from
    Ray workers), whatever its constructor takes.
    """

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (type(self), self.args, self.__dict__))


class PluginError(PdcError):
    """A plugin failed to load, or one of its hooks failed or returned garbage."""


class BackendError(PdcError):
    """A backend failed to do what it was asked."""


class BackendUnavailable(BackendError, LookupError):
    """A backend name is unknown, or names a backend that cannot run here.

    The message lists the installed backends, says why the requested one is not
    available and which distribution to ``pip install``.
    """


class EnvironmentSettingError(BackendUnavailable):
    """An environment variable that pdc reads has a value pdc cannot use.

    ``PDC_BACKEND`` naming no installed backend, a backend that cannot run here or a
    device that does not exist, or a blank or malformed value; ``PDC_PLUGINS`` naming
    no installed plugin, only commas and blanks, or plugins none of whose backends can
    run here. :func:`~pdc_core.get_backend` without a name (and everything that uses
    the default backend) raises it, before anything is started; the ``pdc`` command
    prints its message as a one-line error and exits with status 2. An empty value
    counts as unset.

    The message is one line: ``variable=value``, the ``reason`` and the ``choices``
    (the values that would work here). It is a :class:`BackendUnavailable`, so it is
    also a :class:`LookupError`.
    """

    def __init__(
        self, variable: str, value: str, reason: str, choices: tuple[str, ...] | list[str] = ()
    ) -> None:
        listing = ", ".join(choices) if choices else "none here"
        super().__init__(
            f"{variable}={value!r}: {reason}; choices: {listing} (or unset {variable})"
        )
        self.variable = variable
        self.value = value
        self.reason = reason
        self.choices = tuple(choices)


class CapabilityError(BackendError):
    """A backend was asked for something it declares it cannot do."""


class PoolError(PdcError, ValueError):
    """A buffer was released to a pool that did not hand it out, or released twice."""


class PoolLimitError(PdcError, MemoryError):
    """A pool with a byte limit cannot satisfy a request even after evicting free buffers."""


class MessageError(PdcError):
    """Base of the errors about a message's bytes."""


class MessageSerializationError(MessageError):
    """A message of ``message_type`` could not be turned into bytes."""

    def __init__(self, message_type: type, cause: Exception) -> None:
        self.message_type = message_type
        self.cause = cause
        super().__init__(f"Failed to serialize message of type '{message_type.__name__}': {cause}")


class MessageDeserializationError(MessageError):
    """Bytes could not be turned into a message of ``message_type``."""

    def __init__(self, message_type: type, cause: Exception) -> None:
        self.message_type = message_type
        self.cause = cause
        super().__init__(
            f"Failed to deserialize message to type '{message_type.__name__}': {cause}"
        )


class BufferError(PdcError):
    """Base of the errors about a buffer."""


class BufferNotAllocatedError(BufferError):
    """A buffer without memory (before its first use, or after ``free()``) was asked
    for something only its data could give."""

    def __init__(self) -> None:
        super().__init__(
            "Buffer has not been allocated: it has no data yet (call allocate(), or write it)"
        )


# --- mailboxes, actors and ring kernels --------------------------------------------


class MailboxError(PdcError):
    """Base class of the errors a :class:`~pdc_core.Mailbox` raises."""


class MailboxFull(MailboxError, RuntimeError, WouldBlock):
    """A mailbox is full: ``send_nowait`` (any policy but ``"drop_oldest"``), or a
    ``send`` under the ``"raise"`` policy. It is also an :class:`anyio.WouldBlock`, what
    an anyio stream's ``send_nowait`` raises when it cannot send without waiting.

    ``accepted`` says how many messages of a batch were enqueued before the mailbox
    filled up (always 0 for a single message); the rest were not enqueued.
    """

    def __init__(self, message: str, *, capacity: int, accepted: int = 0) -> None:
        super().__init__(message)
        self.capacity = capacity
        self.accepted = accepted


class MailboxClosed(MailboxError, RuntimeError, ClosedResourceError, EndOfStream):
    """The mailbox is closed: nothing more can be sent, and nothing is left to receive.

    A mailbox is an anyio object stream, both ends in one object, so this is both an
    :class:`anyio.ClosedResourceError` (what ``send`` raises on a stream closed by us)
    and an :class:`anyio.EndOfStream` (what ``receive`` raises once the sending side
    closed and everything was received); a mailbox whose receiving side is gone makes
    ``send`` raise one that is also an :class:`anyio.BrokenResourceError`.
    """


class MessageDropped(MailboxError, RuntimeError):
    """A request was evicted by the ``"drop_oldest"`` policy before it was handled.

    Raised from ``ask`` so that a dropped request never leaves its caller waiting. The
    drop is also counted in the mailbox statistics.
    """


class MessageTimeout(PdcError, TimeoutError):
    """A receive or an ``ask`` did not complete within its timeout.

    It is a :class:`TimeoutError`, which is also ``asyncio.TimeoutError`` on Python 3.11+,
    so ``except asyncio.TimeoutError`` catches it under asyncio and under trio.
    """


class ActorError(PdcError):
    """Base class of the errors about actors."""


class ActorStopped(ActorError, RuntimeError):
    """The actor is not running (stopped, stopping, or never started).

    Requests still pending when an actor stops fail with this error, and so does
    sending to a stopped actor: no request is left waiting for a reply that will never
    come.
    """

    def __init__(self, message: str, *, actor_id: str | None = None) -> None:
        super().__init__(message)
        self.actor_id = actor_id


class ActorCrashed(ActorStopped):
    """An actor raised an exception.

    ``actor_id`` names the actor; ``cause`` (also ``__cause__``) is the original
    exception. An actor nursery raises this when one of its actors crashes without a
    restart policy (or with its restarts exhausted); it is also the error of the
    requests that were pending on the crashed actor.
    """

    def __init__(self, actor_id: str, cause: BaseException, *, note: str = "") -> None:
        detail = f"{type(cause).__name__}: {cause}" if str(cause) else type(cause).__name__
        super().__init__(f"actor {actor_id!r} crashed{note}: {detail}", actor_id=actor_id)
        self.cause = cause
        self.note = note
        self.__cause__ = cause


class ShutdownTimeout(ActorError, TimeoutError):
    """An actor nursery's ``shutdown_timeout`` passed before its actors were done.

    Leaving the block drains the nursery: its actors go on until all are idle at once.
    What was still left when the timeout passed was cancelled; ``left`` maps each actor
    id to the messages it still had (queued, or in hand), and the message names them.
    """

    def __init__(self, timeout: float, left: Mapping[str, int]) -> None:
        listing = ", ".join(f"{actor_id!r}: {count}" for actor_id, count in left.items())
        super().__init__(
            f"the nursery's shutdown_timeout ({timeout:g} s) passed before its actors were "
            f"done; cancelled what was left (messages per actor: {listing or 'none'})"
        )
        self.timeout = timeout
        self.left = dict(left)


class KernelTerminated(ActorStopped):
    """Raised by ``ctx.receive()`` inside a ring kernel that is being terminated.

    When it escapes the kernel function it counts as a clean exit, so a loop written
    as ``while True: msg = await ctx.receive()`` ends cleanly on ``terminate``.
    """


class DuplicateActorError(ActorError, ValueError):
    """An actor or kernel id is already in use by a live actor."""


class KernelAlreadyExistsError(DuplicateActorError):
    """``RingKernelRuntime.launch`` was given the id of a kernel that is still alive."""


class KernelNotFoundError(ActorError, LookupError):
    """No kernel has this id. The message lists the ids that are known."""

    def __init__(self, kernel_id: str, known: list[str] | tuple[str, ...]) -> None:
        listing = ", ".join(repr(k) for k in sorted(known)) or "none"
        super().__init__(f"no ring kernel with id {kernel_id!r}; known ids: {listing}")
        self.kernel_id = kernel_id
        self.known = tuple(sorted(known))


class LifecycleError(ActorError, RuntimeError):
    """An operation is not allowed in the current lifecycle state; the message names it."""


class KernelStateError(LifecycleError):
    """A ring-kernel operation is not allowed in the kernel's current state."""

    def __init__(self, kernel_id: str, state: str, operation: str, *, allowed: str = "") -> None:
        hint = f" (allowed in: {allowed})" if allowed else ""
        super().__init__(f"cannot {operation} kernel {kernel_id!r} in state {state}{hint}")
        self.kernel_id = kernel_id
        self.state = state
        self.operation = operation


# --- persistent kernels and their rings ------------------------------------------


class RecordError(PdcError, TypeError, ValueError):
    """A record does not fit a ring: wrong dtype, shape or size.

    Raised before anything is written to the ring. The message names what was given
    and what the ring expects (both dtypes, or both sizes for a payload larger than a
    slot). It is both a ``TypeError`` and a ``ValueError``.
    """


class RingProtocolError(PdcError, RuntimeError):
    """A ring's control block is in a state the protocol forbids (an index moved
    backwards or past its bound, a bad header): the other side is broken."""


class KernelBodyMissing(PdcError, LookupError):
    """A persistent kernel has no body for the backend it was launched on.

    The message names the backends it has bodies for.
    """


class PersistentKernelError(BackendError):
    """The device side of a persistent kernel reported an error, or its execution failed.

    ``code`` is the kernel's error word (an ``ErrorCode``, a body-defined code from 256
    up, or 0 when the failure was seen by the backend rather than reported by the
    kernel) and ``detail`` the message it left. Requests still pending fail with an
    :class:`ActorCrashed` whose ``cause`` is this error.
    """

    def __init__(self, kernel: str, code: int, detail: str) -> None:
        what = f"error code {code}" if code else "a failure"
        super().__init__(f"persistent kernel {kernel!r} reported {what}: {detail or 'no message'}")
        self.kernel = kernel
        self.code = code
        self.detail = detail


class KernelStopTimeout(BackendError, TimeoutError):
    """A persistent kernel did not stop within the timeout it was given.

    The message says what the control block showed. The ring memory is kept (the
    device may still touch it); on CUDA a kernel that never stops means the context
    has to go.
    """


def _rebuild(
    cls: type[BaseException], args: tuple[object, ...], state: dict[str, object]
) -> BaseException:
    """Unpickle a pdc error as it was, without calling its ``__init__`` again."""
    exc = cls.__new__(cls)
    exc.args = args
    exc.__dict__.update(state)
    cause = state.get("cause")
    if isinstance(cause, BaseException):  # ActorCrashed: ``cause`` is also ``__cause__``
        exc.__cause__ = cause
    return exc
