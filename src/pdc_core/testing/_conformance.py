"""The conformance suite a backend runs against itself.

Subclass :class:`BackendConformance` in a test module of your plugin and name your
backend::

    from pdc_core.testing import BackendConformance

    class TestMyBackend(BackendConformance):
        backend_name = "mybackend"

pytest then runs every check below against ``get_backend("mybackend")``:

* discovery: devices and availability;
* memory: allocation honours shape and dtype for each memory kind the backend
  declares; copies in both directions (synchronous and on a stream) are *copies*: a
  write to the source after the copy, or to the copy, is never seen through the other;
  ``UnifiedBuffer`` synchronization and the memory pool's statistics; the error
  messages for bad input;
* streams and events: work queued on a stream runs in order, ``synchronize`` returns,
  an event recorded on a stream completes (``done`` becomes ``True``, ``synchronize``
  and ``wait`` return), each within :attr:`BackendConformance.timeout` seconds -- a
  call that never returns fails the check instead of hanging the test run;
* with ``PERSISTENT_KERNELS``: a kernel run through the backend's resident kernel
  (one request, batches across the ring's wrap, pause and resume, a drain stop that
  answers everything published, a stop now that answers nothing more, a body
  error surfacing through the error word as :class:`~pdc_core.ActorCrashed`, and a
  kernel launched with device-resident state that its body updates and that
  ``read_state()`` reads back, paused and stopped). The kit runs a host body (a
  Python callable on the request array) by default; a backend with another body
  format overrides :meth:`BackendConformance.persistent_kernel`,
  :meth:`BackendConformance.failing_persistent_kernel` and
  :meth:`BackendConformance.stateful_persistent_kernel`;
* with ``PYTHON_KERNELS``: the seeds' ``@kernel`` examples (a vector add over
  ``cuda.grid(1)``, a 2-D kernel over ``cuda.grid(2)`` and a shared-memory reduction
  with ``cuda.syncthreads()``), compared with NumPy. A backend whose Python kernels
  are not numba.cuda-style bodies is told apart by the error pdc_core.cuda raises
  outside a kernel, and the check skips with that reason; override
  :meth:`BackendConformance.run_python_kernel_examples` to run its own.

Checks that need a capability the backend does not declare are skipped with that
reason. Async checks are marked ``anyio``: anyio's pytest plugin runs them under the
backends the ``anyio_backend`` fixture names (parametrize it over asyncio and trio).

The kit imports pdc only through its public faces (``pdc_core``, ``pdc_core.backend``,
``pdc_core.cuda``), as a third-party plugin does.

The checks are written by role, as mixins over one base (``_conformance_base``):
memory and streams (``_conformance_memory``), Python kernels (``_conformance_python``)
and persistent kernels (``_conformance_persistent``). The hooks and test names are
those of :class:`BackendConformance`, whichever mixin holds them.
"""

from __future__ import annotations

from typing import ClassVar

import pytest

from ._conformance_memory import MemoryChecks
from ._conformance_persistent import PersistentKernelChecks
from ._conformance_python import PythonKernelChecks

__all__ = ["BackendConformance"]


class BackendConformance(MemoryChecks, PythonKernelChecks, PersistentKernelChecks):
    """Checks every backend must pass; set ``backend_name`` in a subclass."""

    #: Async checks run through anyio's pytest plugin.
    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.anyio]
