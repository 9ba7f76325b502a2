"""PyDotCompute's import path ``pydotcompute.ring_kernels.message``: messages.

``RingKernelMessage`` is pdc's :class:`~pdc_core.Message` (with ``serialize()``,
``deserialize(data)`` and ``with_correlation(id)``); the seeds' ``Request`` and
``Response`` are here too. Two thin layers give PyDotCompute's module functions:
:func:`deserialize_message` is ``Message.deserialize`` and :func:`get_message_type`
finds a message class by name in the registry every message class joins when defined.
"""

from __future__ import annotations

from .._seed import Message, Request, Response, RingKernelMessage, _wire, message

__all__ = [
    "Message",
    "Request",
    "Response",
    "RingKernelMessage",
    "deserialize_message",
    "get_message_type",
    "message",
]


def deserialize_message(data: bytes | bytearray | memoryview) -> Message:
    """The message ``serialize()`` made, whatever its class: ``Message.deserialize(data)``."""
    return Message.deserialize(data)


def get_message_type(name: str) -> type[Message] | None:
    """The message class last defined with this name (``"VectorAdd"``), or ``None``."""
    found = _wire.message_type(name)
    return found if isinstance(found, type) and issubclass(found, Message) else None
