"""Body of PyDotCompute\'s :mod:`pdc_core.exceptions`; see its docstring."""

from typing import Any

from .._exceptions import (
    ActorError,
    BackendError,
    BackendUnavailable,
    BufferError,
    BufferNotAllocatedError,
    KernelAlreadyExistsError,
    KernelNotFoundError,
    KernelStateError,
    MailboxFull,
    MessageDeserializationError,
    MessageError,
    MessageSerializationError,
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


class ValidationError(PdcError, ValueError):
    """A configuration or a value failed a check (also a ``ValueError``)."""


class InvalidConfigurationError(ValidationError):
    """``parameter`` has an unusable ``value``; ``reason`` says why."""

    def __init__(self, parameter: str, value: object, reason: str) -> None:
        self.parameter = parameter
        self.value = value
        self.reason = reason
        super().__init__(f"Invalid configuration: {parameter}={value!r} - {reason}")


class TypeValidationError(ValidationError, TypeError):
    """A value of type ``actual`` where ``expected`` was needed (also a ``TypeError``)."""

    def __init__(self, expected: type, actual: type, context: str) -> None:
        self.expected = expected
        self.actual = actual
        self.context = context
        super().__init__(
            f"Type mismatch in {context}: expected {expected.__name__}, got {actual.__name__}"
        )


class BufferSyncError(BufferError):
    """Copying a buffer ``direction`` failed."""

    def __init__(self, direction: str, cause: Exception) -> None:
        self.direction = direction
        self.cause = cause
        super().__init__(f"Failed to sync buffer {direction}: {cause}")


class CUDAError(BackendError):
    """An error of the CUDA backend."""


class MetalError(BackendError):
    """An error of the Metal backend."""


class MSLCompilationError(MetalError):
    """A Metal shader did not compile."""

    def __init__(self, shader_name: str, error_message: str) -> None:
        self.shader_name = shader_name
        self.error_message = error_message
        super().__init__(f"Failed to compile MSL shader '{shader_name}': {error_message}")


class CompilationError(BackendError):
    """A kernel did not compile."""


class KernelCompilationError(CompilationError):
    """Kernel ``kernel_name`` did not compile; ``cause`` is the compiler's error."""

    def __init__(self, kernel_name: str, cause: Any) -> None:
        self.kernel_name = kernel_name
        self.cause = cause
        super().__init__(f"Failed to compile kernel '{kernel_name}': {cause}")


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
