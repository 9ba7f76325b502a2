"""PyDotCompute's import path ``pydotcompute.exceptions``: pdc's errors under its names.

Five PyDotCompute names are aliases of pdc errors that are raised in the same cases:
``PyDotComputeError`` is :class:`~pdc_core.PdcError`, ``KernelError`` is
:class:`~pdc_core.ActorError` (the base of the three kernel errors, and of pdc's other
actor errors), ``QueueFullError`` is :class:`~pdc_core.MailboxFull`,
``QueueTimeoutError`` is :class:`~pdc_core.MessageTimeout` (also a ``TimeoutError``) and
``BackendNotAvailableError`` is :class:`~pdc_core.BackendUnavailable`. Their
constructors and attributes are pdc's. The other PyDotCompute errors are not provided:
pdc raises ``ValueError``, ``TypeError`` or :class:`~pdc_core.BackendError` instead
(docs/migrating-from-pydotcompute.md).
"""

from ._exceptions import (
    ActorError,
    BackendError,
    BackendUnavailable,
    KernelAlreadyExistsError,
    KernelNotFoundError,
    KernelStateError,
    MailboxFull,
    MessageTimeout,
    PdcError,
)

#: PyDotCompute's name for :class:`~pdc_core.PdcError`.
PyDotComputeError = PdcError
#: PyDotCompute's name for :class:`~pdc_core.ActorError`.
KernelError = ActorError
#: PyDotCompute's name for :class:`~pdc_core.MailboxFull`.
QueueFullError = MailboxFull
#: PyDotCompute's name for :class:`~pdc_core.MessageTimeout`.
QueueTimeoutError = MessageTimeout
#: PyDotCompute's name for :class:`~pdc_core.BackendUnavailable`.
BackendNotAvailableError = BackendUnavailable

__all__ = [
    "BackendError",
    "BackendNotAvailableError",
    "KernelAlreadyExistsError",
    "KernelError",
    "KernelNotFoundError",
    "KernelStateError",
    "PyDotComputeError",
    "QueueFullError",
    "QueueTimeoutError",
]
