"""Body of PyDotCompute\'s :mod:`pdc_core.decorators.ring_kernel`; see its docstring."""

from __future__ import annotations

from typing import Any

from pdc_core.lowlevel import check_count

from .._seed import RingKernelDefinition, ring_kernel
from .._seed._ring_kernel import KernelFunction, check_queue_size

__all__ = ["RingKernelBuilder", "get_ring_kernel_meta", "is_ring_kernel", "ring_kernel"]


def is_ring_kernel(func: object) -> bool:
    """Whether ``func`` is a ring kernel definition (made by ``@ring_kernel``)."""
    return isinstance(func, RingKernelDefinition)


def get_ring_kernel_meta(func: object) -> dict[str, Any] | None:
    """``func``'s configuration as PyDotCompute's metadata (``kernel_id``,
    ``input_type``, ``output_type``, ``config``); ``None`` if it is no ring kernel."""
    if not isinstance(func, RingKernelDefinition):
        return None
    return {
        "kernel_id": func.kernel_id,
        "input_type": func.input_type,
        "output_type": func.output_type,
        "config": {
            "input_queue_size": func.input_queue_size,
            "output_queue_size": func.output_queue_size,
            "grid_size": func.grid_size,
            "block_size": func.block_size,
            "backpressure": func.backpressure.value,
        },
    }


class RingKernelBuilder:
    """``@ring_kernel``'s options set one call at a time; :meth:`build` applies them."""

    def __init__(self, kernel_id: str) -> None:
        self._kernel_id = kernel_id
        self._input_type: type | None = None
        self._output_type: type | None = None
        self._input_queue_size = 4096
        self._output_queue_size = 4096
        self._grid_size = 1
        self._block_size = 256
        self._backpressure = "block"
        self._handler: KernelFunction | None = None

    def with_input_type(self, input_type: type) -> RingKernelBuilder:
        """Set ``input_type``."""
        self._input_type = input_type
        return self

    def with_output_type(self, output_type: type) -> RingKernelBuilder:
        """Set ``output_type``."""
        self._output_type = output_type
        return self

    def with_queue_size(self, size: int) -> RingKernelBuilder:
        """Set both queue sizes (an int >= 1: ``ValueError`` naming ``queue_size``)."""
        self._input_queue_size = self._output_queue_size = check_queue_size(size, "queue_size")
        return self

    def with_input_queue_size(self, size: int) -> RingKernelBuilder:
        """Set ``input_queue_size`` (an int >= 1: ``ValueError`` naming it)."""
        self._input_queue_size = check_queue_size(size, "input_queue_size")
        return self

    def with_output_queue_size(self, size: int) -> RingKernelBuilder:
        """Set ``output_queue_size`` (an int >= 1: ``ValueError`` naming it)."""
        self._output_queue_size = check_queue_size(size, "output_queue_size")
        return self

    def with_grid_size(self, size: int) -> RingKernelBuilder:
        """Set ``grid_size`` (an int >= 1: ``TypeError``/``ValueError`` naming it)."""
        self._grid_size = check_count(size, "grid_size")
        return self

    def with_block_size(self, size: int) -> RingKernelBuilder:
        """Set ``block_size`` (an int >= 1: ``TypeError``/``ValueError`` naming it)."""
        self._block_size = check_count(size, "block_size")
        return self

    def with_backpressure(self, strategy: str) -> RingKernelBuilder:
        """Set ``backpressure`` (a name :class:`~pdc_core.Backpressure` accepts)."""
        self._backpressure = strategy
        return self

    def with_handler(self, handler: KernelFunction) -> RingKernelBuilder:
        """Set the kernel function."""
        self._handler = handler
        return self

    def build(self) -> RingKernelDefinition:
        """``@ring_kernel`` applied to the handler with these options (it registers the
        kernel under its id); ``ValueError`` without a handler."""
        if self._handler is None:
            raise ValueError(f"ring kernel {self._kernel_id!r} needs a handler: with_handler(f)")
        return ring_kernel(
            kernel_id=self._kernel_id,
            input_type=self._input_type,
            output_type=self._output_type,
            input_queue_size=self._input_queue_size,
            output_queue_size=self._output_queue_size,
            grid_size=self._grid_size,
            block_size=self._block_size,
            backpressure=self._backpressure,
        )(self._handler)

    def __repr__(self) -> str:
        return (
            f"RingKernelBuilder(id={self._kernel_id!r}, input={self._input_type}, "
            f"output={self._output_type})"
        )
