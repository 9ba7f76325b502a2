"""PyDotCompute's import path ``pydotcompute.ring_kernels.lifecycle``: kernel states.

``KernelContext`` is pdc's :class:`~pdc_core.RingKernelContext`, the ``ctx`` a kernel
function receives, under PyDotCompute's name; it is not generic, so an annotation
``KernelContext[In, Out]`` needs ``from __future__ import annotations``.

Two thin helpers translate PyDotCompute's ways to pdc's: :class:`RingKernelConfig`
holds a kernel's configuration, checked by pdc's rules, and makes pdc's
:class:`~pdc_core.RingKernelDefinition` (``config.definition(func)``);
:func:`managed_kernel` runs one kernel in a :class:`~pdc_core.RingKernelRuntime` of its
own for an ``async with`` block. A pdc :class:`~pdc_core.RingKernel` is what
``runtime.launch`` returns, never built by hand: its task lives in the runtime's
nursery, so PyDotCompute's ``RingKernel(id, func)`` followed by ``launch()`` has no
equivalent (and pdc's ``KernelState`` has no ``CREATED``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from .._actors import Backpressure
from .._seed import KernelState, RingKernel, RingKernelContext, RingKernelDefinition
from .._seed._ring_kernel import KernelFunction
from .._seed._runtime import RingKernelRuntime

#: PyDotCompute's name for :class:`~pdc_core.RingKernelContext`.
KernelContext = RingKernelContext

__all__ = ["KernelContext", "KernelState", "RingKernel", "RingKernelConfig", "managed_kernel"]


@dataclass(frozen=True)
class RingKernelConfig:
    """A ring kernel's configuration under PyDotCompute's field names.

    Checked when made, by the rules of :class:`~pdc_core.RingKernelDefinition`
    (``ValueError`` or ``TypeError`` naming the value). ``use_fast_queue`` is accepted
    and ignored: every pdc kernel queue is a :class:`~pdc_core.Mailbox`.
    """

    kernel_id: str
    grid_size: int = 1
    block_size: int = 256
    input_queue_size: int = 4096
    output_queue_size: int = 4096
    backpressure_strategy: str = "block"
    use_fast_queue: bool = True

    def __post_init__(self) -> None:
        self.definition(_unused_kernel)  # pdc's checks, in one place

    def definition(self, func: KernelFunction) -> RingKernelDefinition:
        """pdc's definition of ``func`` with this configuration (for ``runtime.launch``)."""
        return RingKernelDefinition(
            func,
            kernel_id=self.kernel_id,
            input_queue_size=self.input_queue_size,
            output_queue_size=self.output_queue_size,
            backpressure=Backpressure.coerce(self.backpressure_strategy),
            grid_size=self.grid_size,
            block_size=self.block_size,
        )


async def _unused_kernel(ctx: RingKernelContext) -> None:
    """The function a configuration is checked with (never run)."""


@asynccontextmanager
async def managed_kernel(
    kernel_id: str, kernel_func: KernelFunction | RingKernelDefinition, **config: Any
) -> AsyncIterator[RingKernel]:
    """``async with managed_kernel(id, func) as kernel:``: ``func`` launched and
    activated in a runtime of its own for the block, terminated after it.

    ``config`` is as for :meth:`RingKernelRuntime.launch <pdc_core.RingKernelRuntime.launch>`.
    New code launches kernels in one ``async with RingKernelRuntime()``.
    """
    async with (
        RingKernelRuntime() as runtime,
        runtime.kernel_scope(kernel_id, kernel_func, **config) as kernel,
    ):
        assert isinstance(kernel, RingKernel)  # a kernel function, not a PersistentKernel
        yield kernel
