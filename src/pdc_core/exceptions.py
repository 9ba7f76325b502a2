"""PyDotCompute's import path ``pydotcompute.exceptions``: pdc's errors under its names.

Five PyDotCompute names are aliases of pdc errors that are raised in the same cases:
``PyDotComputeError`` is :class:`~pdc_core.PdcError`, ``KernelError`` is
:class:`~pdc_core.ActorError` (the base of the three kernel errors, and of pdc's other
actor errors), ``QueueFullError`` is :class:`~pdc_core.MailboxFull`,
``QueueTimeoutError`` is :class:`~pdc_core.MessageTimeout` (also a ``TimeoutError``) and
``BackendNotAvailableError`` is :class:`~pdc_core.BackendUnavailable`. Their
constructors and attributes are pdc's. ``BufferNotAllocatedError``,
``MessageSerializationError`` and ``MessageDeserializationError`` are pdc's own errors
(a buffer without memory; a message to or from bytes); their bases ``BufferError``
and ``MessageError`` are :class:`~pdc_core.PdcError` subclasses defined with pdc's
errors and addressed here.

The other PyDotCompute errors are subclasses of pdc errors, with PyDotCompute's
constructors and attributes, for code that raises or catches them by these names:
``ValidationError`` is a :class:`~pdc_core.PdcError` and a ``ValueError`` (pdc itself
raises a plain ``ValueError``/``TypeError`` for a bad argument, so ``except
ValueError`` catches both), ``CompilationError`` and the device errors are
:class:`~pdc_core.BackendError` (what pdc raises for them), ``BufferSyncError`` is a
``BufferError``. pdc raises them only where the
PyDotCompute-path layer does (docs/migrating-from-pydotcompute.md).
"""

from ._publish import publish
from ._pydotcompute.exceptions import (
    BackendError,
    BackendNotAvailableError,
    BufferError,
    BufferNotAllocatedError,
    BufferSyncError,
    CompilationError,
    CUDAError,
    InvalidConfigurationError,
    KernelAlreadyExistsError,
    KernelCompilationError,
    KernelError,
    KernelNotFoundError,
    KernelStateError,
    MessageDeserializationError,
    MessageError,
    MessageSerializationError,
    MetalError,
    MSLCompilationError,
    PyDotComputeError,
    QueueFullError,
    QueueTimeoutError,
    TypeValidationError,
    ValidationError,
)

__all__ = [
    "BackendError",
    "BackendNotAvailableError",
    "BufferError",
    "BufferNotAllocatedError",
    "BufferSyncError",
    "CUDAError",
    "CompilationError",
    "InvalidConfigurationError",
    "KernelCompilationError",
    "KernelAlreadyExistsError",
    "KernelError",
    "KernelNotFoundError",
    "KernelStateError",
    "MSLCompilationError",
    "MessageDeserializationError",
    "MessageError",
    "MessageSerializationError",
    "MetalError",
    "PyDotComputeError",
    "QueueFullError",
    "QueueTimeoutError",
    "TypeValidationError",
    "ValidationError",
]

# Every name still at a private path (the bases pdc keeps private, BufferError and
# MessageError, and PyDotCompute's own errors) is addressed here.
publish(__name__, globals(), __all__)
