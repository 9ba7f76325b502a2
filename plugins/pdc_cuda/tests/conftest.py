"""Fixtures of the GPU tests (``test_cuda_gpu*.py``): the backend, and a watchdog.

A GPU test module marks itself ``pytest.mark.usefixtures("gpu_watchdog")``.
"""

from __future__ import annotations

import faulthandler
import os
from collections.abc import Iterator
from typing import Any

import pytest
from cuda_test_support import real_stderr, skip_if_a_kernel_is_resident

import pdc_core


@pytest.fixture
def gpu_watchdog(request: pytest.FixtureRequest) -> Iterator[None]:
    """End the run, with every thread's stack, if a test hangs on the device
    (``PDC_CUDA_TEST_TIMEOUT`` seconds, 120 by default)."""
    timeout = float(os.environ.get("PDC_CUDA_TEST_TIMEOUT", "120"))
    faulthandler.dump_traceback_later(timeout, exit=True, file=real_stderr(request.config))
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


@pytest.fixture
def cuda() -> Any:
    """The cuda backend, device 0; a test that would start beside a kernel an earlier
    test left resident is skipped with that reason (see skip_if_a_kernel_is_resident)."""
    return skip_if_a_kernel_is_resident(pdc_core.get_backend("cuda"))
