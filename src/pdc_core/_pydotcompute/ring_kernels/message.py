"""Body of PyDotCompute\'s :mod:`pdc_core.ring_kernels.message`; see its docstring."""

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
