"""PyDotCompute's import path ``pydotcompute.ring_kernels.message``: messages.

``RingKernelMessage`` is pdc's :class:`~pdc_core.Message`; the seeds' ``Request`` and
``Response`` are here too. ``get_message_type`` and ``deserialize_message`` are not
provided: pdc passes message objects without serializing them (they pickle).
"""

from .._seed import Message, Request, Response, RingKernelMessage, message

__all__ = ["Message", "Request", "Response", "RingKernelMessage", "message"]
