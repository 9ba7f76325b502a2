"""PyDotCompute's import path ``pydotcompute.ring_kernels.message``: messages.

``RingKernelMessage`` is pdc's :class:`~pdc_core.Message` (with ``serialize()``,
``deserialize(data)`` and ``with_correlation(id)``); the seeds' ``Request`` and
``Response`` are here too. Two thin layers give PyDotCompute's module functions:
:func:`deserialize_message` is ``Message.deserialize`` and :func:`get_message_type`
finds a message class by name in the registry every message class joins when defined.
"""

from .._publish import publish
from .._pydotcompute.ring_kernels.message import (
    Message,
    Request,
    Response,
    RingKernelMessage,
    deserialize_message,
    get_message_type,
    message,
)

__all__ = [
    "Message",
    "Request",
    "Response",
    "RingKernelMessage",
    "deserialize_message",
    "get_message_type",
    "message",
]

publish(__name__, globals(), __all__)
