"""The conformance kit's base: the backend under test, the time limit, discovery.

Every role of :class:`~pdc_core.testing.BackendConformance` (memory and streams,
Python kernels, persistent kernels) is a mixin over :class:`ConformanceBase`, so each
reads the same :attr:`~ConformanceBase.timeout` and ``backend`` fixture a subclass
overrides. :func:`bounded` runs a call that may never return on a watchdog thread;
:func:`eventually` polls a condition until a deadline.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

import numpy as np
import pytest

from pdc_core import get_backend
from pdc_core.backend import Backend

__all__ = ["ConformanceBase", "bounded", "eventually", "to_host"]

_T = TypeVar("_T")


def to_host(backend: Backend, device_array: Any) -> np.ndarray[Any, Any]:
    """``backend.to_host(device_array)``: a NumPy copy of device memory."""
    return backend.to_host(device_array)


def bounded(call: Callable[[], _T], seconds: float, what: str) -> _T:
    """``call()``, run on a watchdog thread: fail the check if it has not returned in time.

    A call that never returns is left behind on its daemon thread; the check fails
    with ``what`` instead of hanging the test run.
    """
    result: list[_T] = []
    error: list[BaseException] = []

    def run() -> None:
        try:
            result.append(call())
        except BaseException as exc:  # re-raised on the test's thread
            error.append(exc)

    thread = threading.Thread(target=run, name="pdc-conformance-watchdog", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"{what} did not return within {seconds:g} s", pytrace=False)
    if error:
        raise error[0]
    return result[0]


def eventually(predicate: Callable[[], bool], seconds: float, what: str) -> None:
    """Poll ``predicate`` until it holds; fail the check with ``what`` after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} within {seconds:g} s", pytrace=False)
        time.sleep(0.001)


class ConformanceBase:
    """What every role of the kit shares: the backend under test and the time limit."""

    backend_name: ClassVar[str]
    #: Seconds any blocking call (``synchronize``, ``wait``, a persistent-kernel
    #: exchange) may take before the check fails.
    timeout: ClassVar[float] = 10.0

    @pytest.fixture
    def backend(self) -> Backend:
        """The backend under test (override to build it differently)."""
        return get_backend(self.backend_name)

    # -- discovery -------------------------------------------------------------------

    def test_declares_itself(self, backend: Backend) -> None:
        """The backend has an identifier name and a distribution, is available, and
        lists at least one device, indexed in order, with its name and kind."""
        assert backend.name.isidentifier()
        assert isinstance(backend.distribution, str)
        assert backend.availability().available
        devices = backend.devices()
        assert devices, "an available backend has at least one device"
        for index, device in enumerate(devices):
            assert device.index == index
            assert device.backend == backend.name
            assert device.kind in {"cpu", "gpu"}
        assert backend.device_info.index == backend.device
